"""The homogeneous synthetic generator (``tiny`` .. ``papers-like``), up to billions of edges.

The generator is a degree-corrected stochastic block model with Chung-Lu degree weights:

* every node ``v`` gets a community ``z[v]`` drawn from the class distribution
  ``p_c ~ (c + 1)^-class_skew`` (uniform for 0, Zipf-like for 1, as real label sets are) and a
  degree weight ``w[v] = (1 - u)^(-1 / (gamma - 1))`` with ``u ~ U[0, 1)``, a Pareto law whose tail
  gives degrees ``P(deg = k) ~ k^-gamma`` (``gamma`` = ``degree_exponent``). Weights are clipped
  so that no node's expected degree exceeds ``sqrt(num_edges)``, the Chung-Lu admissibility bound
  (``w_max^2 <= sum w``); this keeps the hubs' lists mostly free of duplicates and makes the ratio
  of the largest to the mean degree comparable to real graphs' (ogbn-products: ~340);
* each of the ``num_edges / 2`` undirected draws picks a source ``s`` with probability proportional
  to ``w``, then with probability ``homophily`` a destination ``d`` in ``s``'s community and
  otherwise one in any other community, in both cases with probability proportional to ``w``
  among the candidates: an inverse-CDF lookup in the community-sorted cumulative weights (for
  another community, the whole range with ``s``'s community's span cut out), vectorised (a guide
  table over the cumulative weight gives ``np.searchsorted``'s exact answer in O(1) expected
  time per draw);
* features are a noisy community signal ``x[v] = (mu[z[v]] + feature_noise * eps) / s``, with
  one centroid ``mu[c] ~ N(0, I_F)`` per community, ``eps ~ N(0, I_F)`` and ``s = sqrt(1 +
  feature_noise**2)`` (unit-variance features), stored as float32. A classifier on ``x`` alone
  is clearly worse than one that also sees the neighbours' features, so a GNN beats an MLP;
* labels are the communities, except that with probability ``label_noise`` a node's label is
  redrawn from the class distribution, independently of its features and edges. No model can
  predict those, so the best accuracy is about ``1 - label_noise * (1 - sum_c p_c^2)`` however
  large the graph or long the training (``products-like``: ~0.80, like GraphSAGE's on
  ogbn-products), and the measured edge homophily of the labels is below ``homophily``;
* split masks: node ``v`` is in train / val / test when its uniform draw ``u_v`` falls in
  ``[0, t)``, ``[t, t + v)``, ``[t + v, t + v + s)`` (fractions of the spec), so the splits are
  random, disjoint and of the expected sizes.

Stored graph: both directions of every draw, self loops dropped, duplicate edges removed; each
node's in-neighbours are sorted by ID. The edge count is therefore a little below ``num_edges``
(a few percent, more on dense or very skewed specs), and the measured community homophily a
little below ``homophily`` (duplicates are likelier inside a community, whose pool of endpoints
is smaller).

Determinism: every random number comes from a counter-based Philox stream keyed by
``SeedSequence(seed, spawn_key=(stream, block))`` over fixed-size blocks of nodes and of edge
draws (:func:`~fleetgnn.graph.synthetic.common.philox`). ``chunk_edges`` only decides how
many blocks are processed per step, so the arrays are bit-identical for any chunk size, and
:func:`~fleetgnn.graph.synthetic.generate_graph` (in memory) and
:func:`~fleetgnn.graph.synthetic.prepare_synthetic` (to disk) produce the same arrays for the
same spec and seed. Label
noise has a stream of its own: changing ``label_noise`` changes the labels and nothing else.

Bounded memory: the node tables (communities, clipped weights, the community order, cumulative
weights, guide table, then CSC offsets and fill counts: about ``30 * N`` bytes below 128 classes;
generator version 2 held ``~77 * N``) live in RAM; labels, masks, features and everything
edge-sized are written in node blocks or chunks into ``.npy`` memory maps. The CSC is built by a
two-pass counting sort that regenerates the draws instead of storing them: pass 1 counts
in-degrees, pass 2 places every source at its destination's cursor in a scratch memory map, and
pass 3 sorts and deduplicates each node's segment (vectorised over node ranges of about
``chunk_edges`` edges) while compacting in place. Peak RAM is about ``30 * N + 50 *
chunk_edges`` bytes, not a multiple of the output size.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np

from fleetgnn.errors import DatasetError
from fleetgnn.graph.csc import index_dtype
from fleetgnn.graph.csc_passes import node_ranges
from fleetgnn.graph.synthetic.common import (
    EDGE_BLOCK,
    MASKS,
    NODE_BLOCK,
    Progress,
    Sink,
    Ticker,
    blocks,
    count_in_degrees,
    cumsum_in_place,
    cursor_positions,
    is_real,
    philox,
    sort_pairs,
    split_masks,
    write_features,
    write_labels,
)

__all__ = ["SyntheticSpec", "class_probabilities", "generate"]

# Philox stream IDs (first element of the spawn key); changing one changes every dataset.
_NODE_STREAM = 0
_CENTROID_STREAM = 1
_FEATURE_STREAM = 2
_EDGE_STREAM = 3
_LABEL_STREAM = 4
_EDGE_ATTR_STREAM = 5


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
    """The shape and statistics of a synthetic graph.

    Args:
        num_nodes: Number of nodes ``N`` (>= 1).
        num_edges: Target number of directed edges after symmetrisation (both directions count);
            ``num_edges // 2`` undirected draws are made, the stored count is slightly lower after
            self loops and duplicates are removed.
        num_features: Feature dimension ``F`` (>= 1).
        num_classes: Number of classes and communities ``C`` (>= 1).
        train_frac: Expected fraction of nodes in the train split.
        val_frac: Expected fraction of nodes in the validation split.
        test_frac: Expected fraction of nodes in the test split (the three sum to <= 1).
        homophily: Probability that a draw's destination is in its source's community, in
            ``[0, 1]`` (the labels' measured homophily is lower when ``label_noise > 0``).
        degree_exponent: Power-law exponent ``gamma > 1`` of the degree distribution (real graphs:
            2 to 3; smaller is more skewed).
        feature_noise: Standard deviation of the Gaussian noise added to the unit-variance class
            centroids (>= 0); larger makes features alone less informative.
        label_noise: Probability in ``[0, 1]`` that a node's label is redrawn from the class
            distribution, independently of its features and edges (which follow its community).
            No model can predict a redrawn label, so the best accuracy is about
            ``1 - label_noise * (1 - sum_c p_c^2)``.
        class_skew: Exponent of the class sizes, ``p_c ~ (c + 1)^-class_skew`` in ``[0, 10]``:
            0 gives equal classes, 1 a Zipf law (real label sets are skewed like that).
        name: Dataset name.
        edge_features: Width ``D`` of the edge features ``edge_attr`` (0: none). Column 0 of an
            edge is 1 when its ends share a community, else 0; every column gets standard normal
            noise times ``feature_noise / 2``, drawn per block of :data:`EDGE_BLOCK` CSC edges.
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    train_frac: float
    val_frac: float
    test_frac: float
    homophily: float = 0.8
    degree_exponent: float = 2.5
    feature_noise: float = 2.0
    label_noise: float = 0.0
    class_skew: float = 0.0
    name: str = "synthetic"
    edge_features: int = 0

    def __post_init__(self) -> None:
        ints = (
            ("num_nodes", 1),
            ("num_edges", 0),
            ("num_features", 1),
            ("num_classes", 1),
            ("edge_features", 0),
        )
        for field, low in ints:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise DatasetError(
                    f"SyntheticSpec '{field}' must be an integer >= {low} (got {value!r}); "
                    f"pick a positive size or use spec_for(preset, scale)"
                )
        fracs = (self.train_frac, self.val_frac, self.test_frac)
        for field, value in zip(("train_frac", "val_frac", "test_frac"), fracs, strict=True):
            if not is_real(value) or not 0.0 <= value <= 1.0:
                raise DatasetError(
                    f"SyntheticSpec '{field}' must be a fraction in [0, 1] (got {value!r})"
                )
        if sum(fracs) > 1.0 + 1e-9:
            raise DatasetError(
                f"SyntheticSpec split fractions must sum to <= 1 (got train {self.train_frac} + "
                f"val {self.val_frac} + test {self.test_frac} = {sum(fracs):.6g}); lower one of "
                f"them"
            )
        if not is_real(self.homophily) or not 0.0 <= self.homophily <= 1.0:
            raise DatasetError(
                f"SyntheticSpec 'homophily' must be a probability in [0, 1] (got "
                f"{self.homophily!r}); 0.8 is typical of citation and co-purchase graphs"
            )
        if not is_real(self.degree_exponent) or not 1.0 < self.degree_exponent <= 100.0:
            raise DatasetError(
                f"SyntheticSpec 'degree_exponent' must lie in (1, 100] (got "
                f"{self.degree_exponent!r}); real graphs have 2 to 3"
            )
        if not is_real(self.feature_noise) or not 0.0 <= self.feature_noise < math.inf:
            raise DatasetError(
                f"SyntheticSpec 'feature_noise' must be a finite number >= 0 (got "
                f"{self.feature_noise!r})"
            )
        if not is_real(self.label_noise) or not 0.0 <= self.label_noise <= 1.0:
            raise DatasetError(
                f"SyntheticSpec 'label_noise' must be a probability in [0, 1] (got "
                f"{self.label_noise!r}); 0 keeps every node's label equal to its community"
            )
        if not is_real(self.class_skew) or not 0.0 <= self.class_skew <= 10.0:
            raise DatasetError(
                f"SyntheticSpec 'class_skew' must lie in [0, 10] (got {self.class_skew!r}); 0 "
                f"gives equal classes, 1 Zipf-like class sizes"
            )
        if not isinstance(self.name, str) or not self.name:
            raise DatasetError(
                f"SyntheticSpec 'name' must be a non-empty string (got {self.name!r})"
            )

    @property
    def num_draws(self) -> int:
        """Number of undirected edge draws, ``num_edges // 2``."""
        return int(self.num_edges) // 2

    def output_bytes(self) -> int:
        """Approximate size of the generated dataset on disk (upper bound on edges)."""
        n, e = int(self.num_nodes), int(self.num_edges)
        return (
            8 * (n + 1)  # indptr
            + index_dtype(n).itemsize * e  # indices
            + 4 * n * int(self.num_features)  # x
            + 8 * n  # y
            + 3 * n  # masks
        )

    def scaled(self, preset: str, scale: float) -> SyntheticSpec:
        """This spec with nodes and edges scaled linearly, named ``preset@scale``.

        Raises:
            DatasetError: A scale leaving fewer than 2 nodes.
        """
        num_nodes = int(round(self.num_nodes * scale))
        if num_nodes < 2:
            raise DatasetError(
                f"'scale' {scale:g} leaves {num_nodes} nodes of preset {preset!r} "
                f"({self.num_nodes} nodes at scale 1); use scale >= {2 / self.num_nodes:.3g}"
            )
        return dataclasses.replace(
            self,
            num_nodes=num_nodes,
            num_edges=int(round(self.num_edges * scale)),
            name=f"{preset}@{scale:g}",
        )


#: Bumped whenever the generator's output for a given spec and seed changes (cache keys use it).
GENERATOR_VERSION = 3


# ---------------------------------------------------------------------------- node data
@dataclasses.dataclass(frozen=True)
class NodeTables:
    """Node-level state shared by the edge passes (arrays ``[N]``, ``[B]`` or ``[C]``)."""

    z: np.ndarray  # [N] community of each node (smallest signed dtype holding C classes)
    order: np.ndarray  # index dtype [N]: nodes sorted by community (stable)
    cum: np.ndarray  # float64 [N]: inclusive cumulative weights in `order`
    class_lo: np.ndarray  # int64 [C]: first position of class c in `order`
    class_hi: np.ndarray  # int64 [C]: one past the last position
    class_start: np.ndarray  # float64 [C]: cumulative weight before class c
    class_weight: np.ndarray  # float64 [C]: total weight of class c
    nonempty: np.ndarray  # int64 [K]: classes with at least one node
    guide: np.ndarray  # [B]: guide[k] = searchsorted(cum, k * width, "right")
    width: float  # cumulative weight per guide bucket

    def lookup(self, t: np.ndarray) -> np.ndarray:
        """``np.searchsorted(cum, t, side="right")``, exactly, in O(1) expected per target.

        A guide table over equal-width buckets of the cumulative weight gives a start position
        that is never past the answer; since every weight is >= 1 and buckets are about one mean
        weight wide, one or two vectorised steps forward finish almost every target (the rare
        rest falls back to a binary search).
        """
        n = self.cum.size
        k = (t / self.width).astype(np.int64)
        np.clip(k, 0, self.guide.size - 1, out=k)
        k -= k * self.width > t  # guarantee k * width <= t despite rounding
        np.maximum(k, 0, out=k)
        pos = self.guide[k].astype(np.int64)
        del k
        todo = np.flatnonzero(self.cum[np.minimum(pos, n - 1)] <= t)
        for _ in range(8):
            if todo.size == 0:
                break
            pos[todo] += 1
            p = pos[todo]
            todo = todo[(p < n) & (self.cum[np.minimum(p, n - 1)] <= t[todo])]
        if todo.size:
            pos[todo] = np.searchsorted(self.cum, t[todo], side="right")
        return pos


def _class_dtype(num_classes: int) -> np.dtype:
    """The smallest signed integer dtype that holds every class ID (1 byte up to 127 classes)."""
    for dt in (np.int8, np.int16, np.int32):
        if num_classes <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)  # pragma: no cover - more than 2^31 classes


def class_probabilities(spec: SyntheticSpec) -> np.ndarray:
    """The class distribution ``p_c ~ (c + 1)^-class_skew`` of ``spec`` (float64 ``[C]``)."""
    p = np.arange(1, int(spec.num_classes) + 1, dtype=np.float64) ** -float(spec.class_skew)
    return p / p.sum()


def _class_cdf(spec: SyntheticSpec) -> np.ndarray:
    cdf = np.cumsum(class_probabilities(spec))
    cdf[-1] = 1.0  # a uniform draw in [0, 1) always finds a class
    return cdf


def _draw_classes(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF class draws for uniforms ``u`` in ``[0, 1)`` (int64)."""
    return np.minimum(np.searchsorted(cdf, u, side="right"), cdf.size - 1)


def node_draws(
    spec: SyntheticSpec, seed: int, masks: dict[str, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Communities and raw Pareto weights of every node, block by block.

    The split masks come from the same draws and are written into ``masks`` (``train_mask``,
    ``val_mask``, ``test_mask``: bool ``[N]`` arrays, memory maps on disk) when given, so no
    ``[N]`` array of split draws is held.

    Returns:
        ``(z, w)``: communities (:func:`_class_dtype` ``[N]``) and float64 weights ``[N]``.
    """
    n = int(spec.num_nodes)
    z = np.empty(n, dtype=_class_dtype(int(spec.num_classes)))
    w = np.empty(n, dtype=np.float64)
    cdf = _class_cdf(spec)
    inv_shape = -1.0 / (float(spec.degree_exponent) - 1.0)
    fracs = (spec.train_frac, spec.val_frac, spec.test_frac)
    for b, lo, hi in blocks(n, NODE_BLOCK):
        u = philox(seed, _NODE_STREAM, b).random((3, hi - lo))
        z[lo:hi] = _draw_classes(cdf, u[0])
        np.subtract(1.0, u[1], out=u[1])  # (0, 1]
        np.power(u[1], inv_shape, out=w[lo:hi])  # Pareto(x_m = 1, shape = gamma - 1) >= 1
        if masks is not None:
            split_masks(masks, lo, hi, u[2], fracs)
    return z, w


def write_node_labels(spec: SyntheticSpec, seed: int, z: np.ndarray, y: np.ndarray) -> None:
    """Fill the labels ``y`` (int64 ``[N]``) block by block.

    A label is the node's community or, with probability ``label_noise``, a class redrawn from
    the class distribution (a stream of its own, so nothing else changes with ``label_noise``).
    """
    cdf = _class_cdf(spec)
    redraw = functools.partial(_draw_classes, cdf)
    write_labels(y, lambda lo, hi: z[lo:hi], spec.label_noise, redraw, seed, _LABEL_STREAM)


def _class_order(z: np.ndarray, class_lo: np.ndarray) -> np.ndarray:
    """``np.argsort(z, kind="stable")`` as a counting sort over node blocks.

    Only the index-dtype result is ``[N]``; an argsort would also hold an int64 ``[N]``.
    """
    n = z.size
    order = np.empty(n, dtype=index_dtype(n))
    cursor = class_lo.copy()
    for lo in range(0, n, NODE_BLOCK):
        hi = min(n, lo + NODE_BLOCK)
        zb = z[lo:hi]
        ob = np.argsort(zb, kind="stable")
        zs = zb[ob]
        counts = np.bincount(zs, minlength=class_lo.size)
        first = np.cumsum(counts) - counts  # where each class starts in the sorted block
        order[cursor[zs] + (np.arange(hi - lo) - first[zs])] = ob + lo
        cursor += counts
    return order


def node_tables(spec: SyntheticSpec, z: np.ndarray, w: np.ndarray) -> NodeTables:
    """Clip weights to the Chung-Lu bound (in place) and build the per-class sampling tables.

    Holds ``z``, ``w``, ``order``, ``cum`` and ``guide`` (about 25 bytes per node for fewer than
    128 classes and 2^31 nodes); every other temporary is a node block.
    """
    n, c = int(spec.num_nodes), int(spec.num_classes)
    if spec.num_edges > 0:
        # expected degree ~ num_edges * w / sum(w); keep it <= sqrt(num_edges)
        cap = float(w.sum()) / math.sqrt(float(spec.num_edges))
        np.minimum(w, max(cap, 1.0), out=w)
    sizes = np.bincount(z, minlength=c).astype(np.int64)
    class_hi = np.cumsum(sizes)
    class_lo = class_hi - sizes
    order = _class_order(z, class_lo)
    cum = np.empty(n, dtype=np.float64)
    carry = 0.0
    for lo in range(0, n, NODE_BLOCK):
        seg = cum[lo : lo + NODE_BLOCK]
        np.take(w, order[lo : lo + NODE_BLOCK], out=seg)
        seg[0] += carry  # the same additions, in the same order, as one np.cumsum
        np.cumsum(seg, out=seg)
        carry = float(seg[-1])

    def before(pos: np.ndarray) -> np.ndarray:  # cumulative weight before position `pos`
        return np.where(pos > 0, cum[np.maximum(pos - 1, 0)], 0.0)

    class_start = before(class_lo)
    class_weight = before(class_hi) - class_start
    nonempty = np.flatnonzero(sizes > 0).astype(np.int64)
    # guide table: about one bucket per node (weights are >= 1, so at most one per weight unit)
    total = float(cum[-1])
    buckets = max(1, min(n, math.ceil(total)))
    width = total / buckets if total > 0 else 1.0
    guide = np.empty(buckets, dtype=index_dtype(n + 1))
    for lo in range(0, buckets, NODE_BLOCK):
        hi = min(buckets, lo + NODE_BLOCK)
        guide[lo:hi] = np.searchsorted(cum, np.arange(lo, hi, dtype=np.int64) * width, "right")
    return NodeTables(
        z, order, cum, class_lo, class_hi, class_start, class_weight, nonempty, guide, width
    )


def _centroids(spec: SyntheticSpec, seed: int) -> np.ndarray:
    rng = philox(seed, _CENTROID_STREAM, 0)
    return rng.standard_normal((int(spec.num_classes), int(spec.num_features)), dtype=np.float32)


def write_node_features(
    spec: SyntheticSpec, seed: int, z: np.ndarray, x: np.ndarray, tick: Callable[[int], None]
) -> None:
    """Fill ``x`` ``[N, F]``: ``x = (mu[z] + feature_noise * eps) / s`` (:func:`write_features`)."""
    scale = np.float32(1.0 / math.sqrt(1.0 + float(spec.feature_noise) ** 2))
    mu = _centroids(spec, seed) * scale
    noise = np.float32(spec.feature_noise) * scale
    write_features(x, mu, noise, lambda lo, hi: z[lo:hi], seed, _FEATURE_STREAM, tick)


# ---------------------------------------------------------------------------- edge draws
def _draw_edges(
    spec: SyntheticSpec, seed: int, nodes: NodeTables, b0: int, b1: int
) -> tuple[np.ndarray, np.ndarray]:
    """The undirected draws of edge blocks ``[b0, b1)`` as ``(src, dst)`` node IDs, loops dropped.

    Every draw is a pure function of its three uniforms, so the result for a block does not
    depend on which other blocks share the step.
    """
    m = spec.num_draws
    parts = []
    for b in range(b0, b1):
        size = min(EDGE_BLOCK, m - b * EDGE_BLOCK)
        parts.append(philox(seed, _EDGE_STREAM, b).random((3, size)))
    u = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    del parts
    src, dst = draw_pairs(u, nodes, float(spec.homophily))
    keep = src != dst
    return src[keep], dst[keep]


def draw_pairs(u: np.ndarray, nodes: NodeTables, h: float) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of the draws with uniforms ``u`` ``[3, M]`` (self loops included).

    Row 0 picks the source, row 1 decides (``< h``) whether the destination is in the source's
    community, row 2 picks the destination; ``u`` is not modified.
    """
    n = nodes.order.size
    # source: proportional to w over all nodes
    total = float(nodes.cum[-1])
    target = u[0] * total
    pos = nodes.lookup(target)
    np.minimum(pos, n - 1, out=pos)
    src = nodes.order[pos]
    # destination: with probability h a node of the source's community, else a node of another
    # community; either way proportional to w among the candidates (the other communities'
    # cumulative weight is the whole range with the source community's span cut out)
    cls = nodes.z[src]
    np.take(nodes.class_weight, cls, out=target)
    target *= u[2]
    target += nodes.class_start[cls]
    mixed = nodes.nonempty.size > 1 and h < 1.0
    if mixed:
        other = np.flatnonzero(u[1] >= h)
        c = cls[other]
        weight, start = nodes.class_weight[c], nodes.class_start[c]
        t = u[2][other] * (total - weight)
        t += np.where(t >= start, weight, 0.0)
        target[other] = t
        del other, c, weight, start, t
    pos = nodes.lookup(target)
    del target
    np.minimum(pos, n - 1, out=pos)
    # rounding may put a target across a community boundary (rarely): step back to the right side
    wrong = nodes.z[nodes.order[pos]] != cls
    if mixed:
        wrong ^= u[1] >= h  # a draw for another community is wrong inside its own
    bad = np.flatnonzero(wrong)
    if bad.size:
        c = cls[bad]
        first, end = nodes.class_lo[c], nodes.class_hi[c]
        if mixed:
            out = u[1][bad] >= h
            pos[bad] = np.where(
                out, np.where(end < n, end, first - 1), np.clip(pos[bad], first, end - 1)
            )
        else:
            pos[bad] = np.clip(pos[bad], first, end - 1)
    return src, nodes.order[pos]


def edge_chunks(spec: SyntheticSpec, chunk_edges: int) -> list[tuple[int, int]]:
    """Ranges of edge blocks processed per step (each step holds about ``chunk_edges`` edges)."""
    num_blocks = -(-spec.num_draws // EDGE_BLOCK)
    per_step = max(1, chunk_edges // (2 * EDGE_BLOCK))
    return [(b, min(num_blocks, b + per_step)) for b in range(0, num_blocks, per_step)]


# ---------------------------------------------------------------------------- pipeline
def generate(
    spec: SyntheticSpec, seed: int, chunk_edges: int, sink: Sink, progress: Progress | None
) -> None:
    """Generate every array of ``spec`` into ``sink``; see the module docstring for the passes."""
    n = int(spec.num_nodes)
    idx_dtype = index_dtype(n)
    chunk_edges = max(int(chunk_edges), 2 * EDGE_BLOCK)  # whole blocks; no per-node Python loop
    slots = 2 * spec.num_draws  # directed edges before loop and duplicate removal
    tick = Ticker(3 * slots + n, progress)

    # node data: communities and weights (RAM, O(N)); splits, labels and features in blocks
    bool_ = np.dtype(np.bool_)
    masks = {name: sink.create(name, bool_, (n,)) for name in MASKS}
    z, w = node_draws(spec, seed, masks)
    del masks
    write_node_labels(spec, seed, z, sink.create("y", np.dtype(np.int64), (n,)))
    x = sink.create("x", np.dtype(np.float32), (n, int(spec.num_features)))
    write_node_features(spec, seed, z, x, tick)
    del x
    nodes = node_tables(spec, z, w)
    del w
    if not spec.edge_features:
        del z
    chunks = edge_chunks(spec, chunk_edges) if spec.num_draws else []

    # pass 1: in-degree of every node in the symmetrised multigraph, counted into raw_ptr[1:]
    raw_ptr = np.zeros(n + 1, dtype=np.int64)
    draw = functools.partial(_draw_edges, spec, seed, nodes)
    count_in_degrees(raw_ptr, chunks, draw, spec.num_draws, tick)
    cumsum_in_place(raw_ptr)
    num_raw = int(raw_ptr[-1])
    raw = sink.scratch(idx_dtype, (num_raw,))

    # pass 2: place each source at its destination's cursor (the draws are regenerated);
    # the cursor is kept as the count placed so far, int32 while the edges fit
    fill = np.zeros(n, dtype=np.int32 if num_raw < 2**31 else np.int64)
    for b0, b1 in chunks:
        s, d = draw(b0, b1)
        src, dst = np.concatenate([s, d]), np.concatenate([d, s])
        del s, d
        dst, src = sort_pairs(dst, src)  # by (dst, src); pass 3 sorts segments anyway
        raw[cursor_positions(raw_ptr, fill, dst)] = src
        del src, dst
        tick(2 * (min(b1 * EDGE_BLOCK, spec.num_draws) - b0 * EDGE_BLOCK))
    del fill, nodes, draw

    # pass 3: sort and deduplicate each node's segment, compacting in place
    indptr = sink.create("indptr", np.dtype(np.int64), (n + 1,))
    indptr[0] = 0
    written = 0
    pass3_base = tick.done
    for lo_node, hi_node, a, b, local in node_ranges(raw_ptr, chunk_edges):
        seg_dst, seg_src = sort_pairs(local, raw[a:b])
        del local
        keep = np.ones(seg_dst.size, dtype=bool)
        keep[1:] = (seg_dst[1:] != seg_dst[:-1]) | (seg_src[1:] != seg_src[:-1])
        seg_dst, seg_src = seg_dst[keep], seg_src[keep]
        raw[written : written + seg_src.size] = seg_src  # written <= a: never overwrites unread
        kept = np.bincount(seg_dst, minlength=hi_node - lo_node)
        np.cumsum(kept, out=indptr[lo_node + 1 : hi_node + 1])
        indptr[lo_node + 1 : hi_node + 1] += written
        written += int(seg_src.size)
        tick.to(pass3_base + min(slots, b))
    tick.to(pass3_base + slots)
    del raw_ptr

    # final arrays: indices copied out of the compacted scratch in chunks
    indices = sink.create("indices", idx_dtype, (written,))
    step = max(1, chunk_edges)
    for lo in range(0, written, step):
        hi = min(written, lo + step)
        indices[lo:hi] = raw[lo:hi]
    del raw
    sink.drop_scratch()
    if spec.edge_features:
        _write_edge_attr(spec, seed, z, indptr, indices, sink)
    del indices
    tick.to(tick.total)


def _write_edge_attr(
    spec: SyntheticSpec,
    seed: int,
    z: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    sink: Sink,
) -> None:
    """``edge_attr`` ``[E, D]`` float32 (see :class:`SyntheticSpec`), in blocks of CSC edges.

    The noise of block ``b`` (edges ``[b * EDGE_BLOCK, (b + 1) * EDGE_BLOCK)``) comes from its
    own stream, so any chunking gives the same values.
    """
    e, d = int(indices.shape[0]), int(spec.edge_features)
    attr = sink.create("edge_attr", np.dtype(np.float32), (e, d))
    scale = np.float32(float(spec.feature_noise) / 2.0)
    for b, lo in enumerate(range(0, e, EDGE_BLOCK)):
        hi = min(e, lo + EDGE_BLOCK)
        dst = np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1
        same = z[np.asarray(indices[lo:hi])] == z[dst]
        block = philox(seed, _EDGE_ATTR_STREAM, b).standard_normal((hi - lo, d), dtype=np.float32)
        block *= scale
        block[:, 0] += same
        attr[lo:hi] = block
