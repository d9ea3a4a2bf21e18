"""A small in-memory mag-like typed graph with a learnable, type-dependent label signal.

For tests and examples of the typed layers and engines (the scalable on-disk presets live with
the synthetic generators). Schema: ``paper``, ``author``, ``field`` (optionally featureless),
relations ``paper -cites-> paper``, ``author -writes-> paper``, ``paper -has_topic-> field``
and their reverses; labels on papers.

The signal is relational: each field has a class, a paper's label is its field's class, and the
class shows in the *field's* features (and weakly in the paper's own). A model that tells the
``has_topic`` relation apart from ``cites`` and ``writes`` reads it directly; one on the
homogeneous collapse (one node type, one relation) sees it averaged with every other neighbour.
"""

from __future__ import annotations

import numpy as np

from fleetgnn.errors import GraphError
from fleetgnn.graph.hetero import (
    HeteroGraph,
    HeteroSchema,
    add_reverse_relations,
    from_typed_edges,
)


def toy_mag(
    num_papers: int = 200,
    num_authors: int = 120,
    num_fields: int = 12,
    num_classes: int = 4,
    feature_dim: int = 8,
    *,
    author_dim: int | None = None,
    featureless_fields: bool = False,
    cites_per_paper: int = 4,
    authors_per_paper: int = 3,
    paper_signal: float = 0.3,
    field_signal: float = 2.0,
    reverse: bool = True,
    seed: int = 0,
) -> HeteroGraph:
    """A mag-like typed graph (see the module docstring).

    Args:
        num_papers: Papers (the target type).
        num_authors: Authors.
        num_fields: Fields (each gets class ``field % num_classes``).
        num_classes: Classes.
        feature_dim: Feature width of papers (and fields, unless featureless).
        author_dim: Feature width of authors (default ``feature_dim``).
        featureless_fields: Give fields no features (models learn embeddings for them).
        cites_per_paper: Citations drawn per paper (uniform over other papers).
        authors_per_paper: Authors drawn per paper.
        paper_signal: Scale of the class centroid in a paper's own features.
        field_signal: Scale of the class centroid in a field's features.
        reverse: Add the reverse relations (every type then receives messages).
        seed: Seed of every draw.
    """
    rng = np.random.default_rng(seed)
    author_dim = feature_dim if author_dim is None else author_dim
    schema = HeteroSchema(
        node_types=("paper", "author", "field"),
        num_nodes=(num_papers, num_authors, num_fields),
        relations=(
            ("paper", "cites", "paper"),
            ("author", "writes", "paper"),
            ("paper", "has_topic", "field"),
        ),
        target="paper",
    )
    centroids = rng.standard_normal((num_classes, feature_dim))
    field_class = np.arange(num_fields) % num_classes
    topic = rng.integers(0, num_fields, num_papers)
    y = field_class[topic].astype(np.int64)
    src = rng.integers(0, num_papers, num_papers * cites_per_paper)
    dst = np.repeat(np.arange(num_papers), cites_per_paper)
    keep = src != dst
    cites = (src[keep], dst[keep])
    writes = (
        rng.integers(0, num_authors, num_papers * authors_per_paper),
        np.repeat(np.arange(num_papers), authors_per_paper),
    )
    has_topic = (np.arange(num_papers), topic)
    x = {
        "paper": rng.standard_normal((num_papers, feature_dim)) + paper_signal * centroids[y],
        "author": rng.standard_normal((num_authors, author_dim)),
    }
    if not featureless_fields:
        x["field"] = (
            0.5 * rng.standard_normal((num_fields, feature_dim))
            + field_signal * centroids[field_class]
        )
    split = rng.permutation(num_papers)
    n_train, n_val = int(0.6 * num_papers), int(0.2 * num_papers)
    masks = [np.zeros(num_papers, dtype=bool) for _ in range(3)]
    masks[0][split[:n_train]] = True
    masks[1][split[n_train : n_train + n_val]] = True
    masks[2][split[n_train + n_val :]] = True
    g = from_typed_edges(
        schema,
        {schema.relations[0]: cites, schema.relations[1]: writes, schema.relations[2]: has_topic},
        x={t: v.astype(np.float32) for t, v in x.items()},
        y=y,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        num_classes=num_classes,
        name="toy-mag",
    )
    return add_reverse_relations(g) if reverse else g


def homogeneous_collapse(graph: HeteroGraph) -> HeteroGraph:
    """``graph`` as one node type ``node`` and one relation ``edge``.

    The typed view of :meth:`~fleetgnn.graph.hetero.HeteroGraph.to_homogeneous`, for baselines
    that run the same typed model without types. Every type must have features of one width.
    """
    g, _ = graph.to_homogeneous()
    if g.x is None:
        raise GraphError("the collapse needs features of one width on every type")
    schema = HeteroSchema(("node",), (g.num_nodes,), (("node", "edge", "node"),), target="node")
    src = np.asarray(g.indices, dtype=np.int64)
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    return from_typed_edges(
        schema,
        {("node", "edge", "node"): (src, dst)},
        x={"node": np.asarray(g.x)},
        y=np.asarray(g.y),
        train_mask=np.asarray(g.train_mask),
        val_mask=np.asarray(g.val_mask),
        test_mask=np.asarray(g.test_mask),
        num_classes=graph.num_classes,
        name=f"{graph.name} (collapsed)",
    )
