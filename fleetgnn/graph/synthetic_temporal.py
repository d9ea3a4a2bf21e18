"""A synthetic temporal graph whose communities drift: the ``temporal-like`` preset.

The generator is :mod:`fleetgnn.graph.synthetic`'s degree-corrected block model with time:

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
and :func:`generate_temporal_graph` equals :func:`prepare_temporal_synthetic`'s dataset. The
node tables (one community-sorted sampling table per phase: about ``25 * phases * N`` bytes) are
in RAM; the edges are written through memory maps in three passes (count the in-degrees, place
each edge at its destination's cursor, sort each destination's segment by time), holding about
``60 * chunk_edges`` bytes of working arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import numpy as np

from fleetgnn.errors import DatasetError
from fleetgnn.graph.csc import Graph, index_dtype
from fleetgnn.graph.dataset import DatasetWriter
from fleetgnn.graph.edge_time import TIME_DTYPE
from fleetgnn.graph.synthetic import (
    _MASKS,
    EDGE_BLOCK,
    NODE_BLOCK,
    Progress,
    SyntheticSpec,
    _check_chunk_edges,
    _check_seed,
    _DiskSink,
    _edge_chunks,
    _is_real,
    _MemorySink,
    _node_draws,
    _Nodes,
    _nodes,
    _preset,
    _rng,
    _Sink,
    _Ticker,
    _write_features,
    _write_labels,
    blocks,
    count_in_degrees,
    cursor_positions,
    draw_pairs,
    preset_and_scale,
    scaled,
    sort_by_time,
)

__all__ = [
    "TEMPORAL_PRESETS",
    "TemporalSpec",
    "generate_temporal_graph",
    "prepare_temporal_synthetic",
    "temporal_communities",
    "temporal_spec_for",
]

# Philox stream IDs of the temporal generator (the static one uses 0..5)
_DRIFT_STREAM = 16
_TEMPORAL_EDGE_STREAM = 17
#: Bumped whenever the output for a given spec and seed changes.
TEMPORAL_GENERATOR_VERSION = 2  # 2: node_time added, every other array unchanged


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
        if not _is_real(self.drift) or not 0.0 <= self.drift <= 1.0:
            raise DatasetError(
                f"TemporalSpec 'drift' must be a probability in [0, 1] (got {self.drift!r})"
            )

    @property
    def name(self) -> str:
        """The dataset name (the base spec's)."""
        return self.base.name


TEMPORAL_PRESETS: dict[str, TemporalSpec] = {
    # an interaction stream (users and items, messages, transactions): 1M nodes, 20M edges over
    # 1000 time steps, half of the nodes changing community once
    "temporal-like": TemporalSpec(
        base=_preset(
            "temporal-like",
            (1_000_000, 20_000_000, 64, 16),
            (0.6, 0.2, 0.2),
            feature_noise=3.0,
            label_noise=0.05,
            class_skew=0.5,
        ),
        num_times=1000,
        phases=4,
        drift=0.5,
    ),
}


def temporal_spec_for(preset: str, scale: float = 1.0) -> TemporalSpec:
    """A named temporal preset with nodes and edges scaled linearly (times and drift unchanged).

    Raises:
        DatasetError: Unknown preset, a non-positive scale, or one leaving fewer than 2 nodes.
    """
    spec, scale = preset_and_scale(TEMPORAL_PRESETS, preset, scale, "temporal synthetic")
    return (
        spec if scale == 1.0 else dataclasses.replace(spec, base=scaled(spec.base, preset, scale))
    )


def temporal_communities(spec: TemporalSpec, seed: int = 0) -> tuple[np.ndarray, ...]:
    """``(z0, z1, switch)``: first and final community and switch time of every node.

    ``switch[v]`` (int64) is ``num_times`` for a node that never switches (then ``z1 == z0``);
    node ``v`` is in ``z0[v]`` at times ``< switch[v]`` and in ``z1[v]`` from then on.
    """
    seed = _check_seed(seed)
    z0, _ = _node_draws(spec.base, seed)
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
        u = _rng(seed, _DRIFT_STREAM, b).random((3, hi - lo))
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
    spec: TemporalSpec, seed: int, tables: list[_Nodes], b0: int, b1: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, time)`` of the draws of edge blocks ``[b0, b1)``, self loops dropped."""
    m = spec.base.num_draws
    parts = []
    for b in range(b0, b1):
        size = min(EDGE_BLOCK, m - b * EDGE_BLOCK)
        parts.append(_rng(seed, _TEMPORAL_EDGE_STREAM, b).random((4, size)))
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


def _generate(
    spec: TemporalSpec, seed: int, chunk_edges: int, sink: _Sink, progress: Progress | None
) -> None:
    """Generate every array of ``spec`` into ``sink`` (see the module docstring)."""
    base = spec.base
    n = int(base.num_nodes)
    idx_dtype = index_dtype(n)
    chunk_edges = max(int(chunk_edges), 2 * EDGE_BLOCK)
    slots = 2 * base.num_draws
    tick = _Ticker(3 * slots + n, progress)

    masks = {name: sink.create(name, np.dtype(np.bool_), (n,)) for name in _MASKS}
    z0, w = _node_draws(base, seed, masks)
    del masks
    z1, phase = _drift(spec, seed, z0)
    _write_labels(base, seed, z1, sink.create("y", np.dtype(np.int64), (n,)))
    sink.create("node_time", TIME_DTYPE, (n,))[:] = _switch_times(spec, phase)  # no draws
    x = sink.create("x", np.dtype(np.float32), (n, int(base.num_features)))
    _write_features(base, seed, z0, x, tick)
    del x
    tables = []
    for p in range(int(spec.phases)):  # the communities of each phase; weights clipped once
        z = np.where(phase <= p, z1, z0)
        tables.append(_nodes(base if p == 0 else dataclasses.replace(base, num_edges=0), z, w))
    del z0, z1, phase, w
    chunks = _edge_chunks(base, chunk_edges) if base.num_draws else []

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
    sort_by_time(indptr, indices, times, chunk_edges, tick, by_source=True)
    sink.create("indptr", np.dtype(np.int64), (n + 1,))[:] = indptr
    tick.to(tick.total)


def generate_temporal_graph(
    spec: TemporalSpec, seed: int = 0, *, chunk_edges: int = 4_000_000
) -> Graph:
    """Generate a temporal synthetic graph in memory (tests and small scales).

    Args:
        spec: What to generate (:data:`TEMPORAL_PRESETS`, :func:`temporal_spec_for`).
        seed: Random seed (>= 0); the same seed gives bit-identical arrays.
        chunk_edges: Edges processed per step; affects memory and speed only.

    Returns:
        A validated :class:`Graph` with ``edge_time``, ``node_time``, features, labels and
        split masks.

    Raises:
        DatasetError: An invalid spec, seed or ``chunk_edges``.
    """
    if not isinstance(spec, TemporalSpec):
        raise DatasetError(
            f"'spec' must be a TemporalSpec (got {type(spec).__name__}); build one with "
            f"temporal_spec_for(preset, scale), valid presets: {', '.join(TEMPORAL_PRESETS)}"
        )
    seed = _check_seed(seed)
    sink = _MemorySink()
    _generate(spec, seed, _check_chunk_edges(chunk_edges), sink, None)
    return Graph(num_classes=int(spec.base.num_classes), name=spec.name, **sink.arrays)


def prepare_temporal_synthetic(
    out: str | os.PathLike[str],
    preset: str | TemporalSpec = "temporal-like",
    scale: float = 1.0,
    seed: int = 0,
    overwrite: bool = False,
    chunk_edges: int = 4_000_000,
    progress: Progress | None = None,
    feature_dtype: str | None = None,
) -> Path:
    """Generate a temporal synthetic graph into a dataset directory, in bounded memory.

    The arrays equal :func:`generate_temporal_graph`'s. ``meta.json`` records ``source =
    "synthetic"``, ``preset``, ``scale``, ``seed``, the ``spec`` (with ``num_times``, ``phases``
    and ``drift``) and, as every timed dataset, ``has_edge_time``, ``edge_time_range``,
    ``has_node_time`` and ``node_time_range``. ``feature_dtype``: store the features compact
    (:class:`DatasetWriter`'s ``feature_dtype``).

    Raises:
        DatasetError: Unknown preset, invalid scale/seed/chunk size, or ``out`` already exists.
    """
    if isinstance(preset, TemporalSpec):
        if scale != 1.0:
            raise DatasetError("'scale' applies to named presets only (got a TemporalSpec)")
        spec, preset_name = preset, preset.name
    else:
        spec, preset_name = temporal_spec_for(preset, scale), str(preset)
    seed = _check_seed(seed)
    chunk_edges = _check_chunk_edges(chunk_edges)
    with DatasetWriter(
        out, name=spec.name, overwrite=overwrite, feature_dtype=feature_dtype
    ) as writer:
        _generate(spec, seed, chunk_edges, _DiskSink(writer), progress)
        return writer.commit(
            num_classes=int(spec.base.num_classes),
            source="synthetic",
            preset=preset_name,
            scale=float(scale),
            seed=seed,
            spec=dataclasses.asdict(spec),
            generator_version=TEMPORAL_GENERATOR_VERSION,
        )
