"""A synthetic temporal graph whose communities drift: the ``temporal-like`` preset.

The generator is :mod:`~fleetgnn.graph.synthetic.homogeneous`'s degree-corrected block model
with time:

* every node ``v`` gets a first community ``z0[v]`` and a Pareto degree weight as there; with
  probability ``drift`` it also gets a second community ``z1[v] != z0[v]`` (uniform among the
  others) and a switch phase ``p[v]`` uniform in ``1 .. phases - 1``; the others keep ``z0``
  (``p[v] = phases``). Time ``[0, num_times)`` is cut into ``phases`` equal phases, and ``v``'s
  community at time ``t`` is ``z0[v]`` before its switch time ``switch[v] = p[v] * num_times //
  phases`` and ``z1[v]`` from then on (:func:`temporal_communities`);
* each of the ``num_edges / 2`` undirected draws gets an integer time ``t`` uniform in
  ``[0, num_times)`` and is then drawn like a static draw in the communities of ``t``'s phase:
  the source proportional to its weight, the destination with probability ``homophily`` in the
  source's community *at time t* (else in another), proportional to weight. A node's edges after
  its switch therefore follow its new community: the future is informative;
* features are the noisy centroid of the *first* community ``z0`` and labels the *final*
  community (``z1`` for a node that switches), with ``label_noise`` as in the static presets: a
  model that sees the edges after a node's switch learns its label from them, one that sees only
  the past must rely on the stale features and the older edges;
* node times (``node_time``): a moving node's switch time ``switch[v]``, a staying node's
  ``num_times`` (after every edge). A node task asks a moving node's label (its new community)
  at the moment it moves: the edges before then show only its old community, the later ones
  the new one, so a model whose message passing sees future edges scores differently on the
  moving nodes from one that samples each node's neighbourhood before its node time;
* splits as the static presets.

Stored graph: both directions of every draw with the draw's time in ``edge_time`` (int64), self
loops dropped, nothing deduplicated (a pair may interact at several times); each node's
in-edges sorted by ``(time, source)``, which is the order :class:`~fleetgnn.graph.csc.Graph`
requires of ``edge_time``.

Determinism and memory follow the static generator: Philox streams keyed by ``(seed, stream,
block)`` over fixed blocks of nodes and draws, so the arrays do not depend on ``chunk_edges``,
and :func:`~fleetgnn.graph.synthetic.generate_graph` equals
:func:`~fleetgnn.graph.synthetic.prepare_synthetic`'s dataset. The node tables (one
community-sorted sampling table per phase: about ``25 * phases * N`` bytes) are in RAM; the
edges are written through memory maps in three passes (count the in-degrees, place each edge at
its destination's cursor, sort each destination's segment by time), holding about ``60 *
chunk_edges`` bytes of working arrays.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from fleetgnn.errors import DatasetError
from fleetgnn.graph.csc import index_dtype
from fleetgnn.graph.csc_passes import sort_segments_by_time
from fleetgnn.graph.edge_time import TIME_DTYPE
from fleetgnn.graph.synthetic.common import (
    EDGE_BLOCK,
    MASKS,
    NODE_BLOCK,
    Progress,
    Sink,
    Ticker,
    blocks,
    check_seed,
    count_in_degrees,
    cursor_positions,
    is_real,
    philox,
)
from fleetgnn.graph.synthetic.homogeneous import (
    NodeTables,
    SyntheticSpec,
    draw_pairs,
    edge_chunks,
    node_draws,
    node_tables,
    write_node_features,
    write_node_labels,
)

__all__ = ["TemporalSpec", "generate", "temporal_communities"]

# Philox stream IDs of the temporal generator (the static one uses 0..5)
_DRIFT_STREAM = 16
_TEMPORAL_EDGE_STREAM = 17
#: Bumped whenever the output for a given spec and seed changes.
GENERATOR_VERSION = 2  # 2: node_time added, every other array unchanged


@dataclasses.dataclass(frozen=True)
class TemporalSpec:
    """A static :class:`~fleetgnn.graph.synthetic.SyntheticSpec` plus time and drift.

    Args:
        base: Nodes, edges, features, classes, splits and statistics (its ``edge_features``
            must be 0).
        num_times: Edge times are integers in ``[0, num_times)`` (>= 1).
        phases: Time is cut into this many equal phases; a node switches community at the
            start of one of phases ``1 .. phases - 1`` (``2 <= phases <= num_times``).
        drift: Probability in ``[0, 1]`` that a node switches community (once).
    """

    base: SyntheticSpec
    num_times: int = 1000
    phases: int = 4
    drift: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.base, SyntheticSpec):
            raise DatasetError(
                f"TemporalSpec 'base' must be a SyntheticSpec (got {type(self.base).__name__})"
            )
        if self.base.edge_features:
            raise DatasetError(
                "TemporalSpec 'base.edge_features' must be 0: the temporal generator draws no "
                "edge features"
            )
        for field, low in (("num_times", 1), ("phases", 2)):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise DatasetError(
                    f"TemporalSpec '{field}' must be an integer >= {low} (got {v!r})"
                )
        if self.phases > self.num_times:
            raise DatasetError(
                f"TemporalSpec 'phases' ({self.phases}) must be <= 'num_times' "
                f"({self.num_times}): every phase needs at least one time"
            )
        if not is_real(self.drift) or not 0.0 <= self.drift <= 1.0:
            raise DatasetError(
                f"TemporalSpec 'drift' must be a probability in [0, 1] (got {self.drift!r})"
            )

    @property
    def name(self) -> str:
        """The dataset name (the base spec's)."""
        return self.base.name

    @property
    def num_classes(self) -> int:
        """The number of classes (the base spec's)."""
        return int(self.base.num_classes)

    def scaled(self, preset: str, scale: float) -> TemporalSpec:
        """This spec with nodes and edges scaled linearly (times and drift unchanged).

        Raises:
            DatasetError: A scale leaving fewer than 2 nodes.
        """
        return dataclasses.replace(self, base=self.base.scaled(preset, scale))


def temporal_communities(spec: TemporalSpec, seed: int = 0) -> tuple[np.ndarray, ...]:
    """``(z0, z1, switch)``: first and final community and switch time of every node.

    ``switch[v]`` (int64) is ``num_times`` for a node that never switches (then ``z1 == z0``);
    node ``v`` is in ``z0[v]`` at times ``< switch[v]`` and in ``z1[v]`` from then on.
    """
    seed = check_seed(seed)
    z0, _ = node_draws(spec.base, seed)
    z1, phase = _drift(spec, seed, z0)
    return z0, z1, _switch_times(spec, phase)


def _drift(spec: TemporalSpec, seed: int, z0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(z1, phase)``: each node's final community and switch phase (``phases``: never)."""
    n, c, p = int(spec.base.num_nodes), int(spec.base.num_classes), int(spec.phases)
    z1 = z0.copy()
    phase = np.full(n, p, dtype=np.int64)
    if c < 2:
        return z1, phase  # one community: nowhere to drift to
    for b, lo, hi in blocks(n, NODE_BLOCK):
        u = philox(seed, _DRIFT_STREAM, b).random((3, hi - lo))
        moves = u[0] < float(spec.drift)
        shift = 1 + np.minimum((u[1] * (c - 1)).astype(np.int64), c - 2)  # 1 .. C - 1
        z1[lo:hi][moves] = ((z0[lo:hi].astype(np.int64) + shift) % c)[moves]
        at = 1 + np.minimum((u[2] * (p - 1)).astype(np.int64), p - 2)  # 1 .. phases - 1
        phase[lo:hi][moves] = at[moves]
    return z1, phase


def _switch_times(spec: TemporalSpec, phase: np.ndarray) -> np.ndarray:
    """The first time of each phase (``num_times`` for ``phase == phases``)."""
    return phase * int(spec.num_times) // int(spec.phases)


def _phase_of(spec: TemporalSpec, t: np.ndarray) -> np.ndarray:
    """The phase of each time: ``p`` with ``start(p) <= t < start(p + 1)``."""
    p = int(spec.phases)
    starts = np.arange(1, p, dtype=np.int64) * int(spec.num_times) // p
    return np.searchsorted(starts, t, side="right")


def _draw_timed(
    spec: TemporalSpec, seed: int, tables: list[NodeTables], b0: int, b1: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, time)`` of the draws of edge blocks ``[b0, b1)``, self loops dropped."""
    m = spec.base.num_draws
    parts = []
    for b in range(b0, b1):
        size = min(EDGE_BLOCK, m - b * EDGE_BLOCK)
        parts.append(philox(seed, _TEMPORAL_EDGE_STREAM, b).random((4, size)))
    u = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    del parts
    t = np.minimum((u[3] * int(spec.num_times)).astype(np.int64), int(spec.num_times) - 1)
    phase = _phase_of(spec, t)
    idx = index_dtype(int(spec.base.num_nodes))
    src, dst = np.empty(t.size, dtype=idx), np.empty(t.size, dtype=idx)
    for p, nodes in enumerate(tables):
        sel = np.flatnonzero(phase == p)
        if sel.size:
            src[sel], dst[sel] = draw_pairs(u[:3, sel], nodes, float(spec.base.homophily))
    keep = src != dst
    return src[keep], dst[keep], t[keep]


def generate(
    spec: TemporalSpec, seed: int, chunk_edges: int, sink: Sink, progress: Progress | None
) -> None:
    """Generate every array of ``spec`` into ``sink`` (see the module docstring)."""
    base = spec.base
    n = int(base.num_nodes)
    idx_dtype = index_dtype(n)
    chunk_edges = max(int(chunk_edges), 2 * EDGE_BLOCK)
    slots = 2 * base.num_draws
    tick = Ticker(3 * slots + n, progress)

    masks = {name: sink.create(name, np.dtype(np.bool_), (n,)) for name in MASKS}
    z0, w = node_draws(base, seed, masks)
    del masks
    z1, phase = _drift(spec, seed, z0)
    write_node_labels(base, seed, z1, sink.create("y", np.dtype(np.int64), (n,)))
    sink.create("node_time", TIME_DTYPE, (n,))[:] = _switch_times(spec, phase)  # no draws
    x = sink.create("x", np.dtype(np.float32), (n, int(base.num_features)))
    write_node_features(base, seed, z0, x, tick)
    del x
    tables = []
    for p in range(int(spec.phases)):  # the communities of each phase; weights clipped once
        z = np.where(phase <= p, z1, z0)
        tables.append(node_tables(base if p == 0 else dataclasses.replace(base, num_edges=0), z, w))
    del z0, z1, phase, w
    chunks = edge_chunks(base, chunk_edges) if base.num_draws else []

    # pass 1: in-degrees (both directions of every draw)
    indptr = np.zeros(n + 1, dtype=np.int64)
    draw = functools.partial(_draw_timed, spec, seed, tables)
    count_in_degrees(indptr, chunks, draw, base.num_draws, tick)
    np.cumsum(indptr, out=indptr)
    e = int(indptr[-1])
    indices = sink.create("indices", idx_dtype, (e,))
    times = sink.create("edge_time", TIME_DTYPE, (e,))

    # pass 2: each edge at its destination's cursor (the draws regenerated)
    fill = np.zeros(n, dtype=np.int64)
    for b0, b1 in chunks:
        s, d, t = draw(b0, b1)
        src, dst, tt = np.concatenate([s, d]), np.concatenate([d, s]), np.concatenate([t, t])
        del s, d, t
        order = np.argsort(dst, kind="stable")
        pos = cursor_positions(indptr, fill, dst[order])
        indices[pos] = src[order]
        times[pos] = tt[order]
        tick(2 * (min(b1 * EDGE_BLOCK, base.num_draws) - b0 * EDGE_BLOCK))
    del fill, tables, draw

    # pass 3: sort each destination's segment by (time, source), node ranges of ~chunk_edges
    sort_segments_by_time(indptr, times, [indices], chunk_edges, ties=indices, tick=tick)
    sink.create("indptr", np.dtype(np.int64), (n + 1,))[:] = indptr
    tick.to(tick.total)
