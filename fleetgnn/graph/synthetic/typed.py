"""Synthetic typed graphs with learnable labels (``mag-like``, ...), streamed to disk.

The generator is a typed planted-community model:

* every node of every type belongs to one of ``C`` communities (``C`` = the target type's
  classes): node ``v`` of any type is in community ``v mod C``, so "a node of community ``c``
  of type ``t``" is ``c + C * k`` for ``k < ceil((N_t - c) / C)`` and no table is needed;
* each relation ``(s, r, d)`` makes ``E_r`` draws: a destination ``v_d`` of type ``d`` with
  ``v_d = floor(N_d * u ** skew)`` (low IDs are hubs: degrees are heavy-tailed), then with
  probability ``homophily`` a source in ``v_d``'s community (``k = floor(count * u' ** skew)``),
  otherwise any source of type ``s`` (same law). Duplicates are kept, as OGB keeps them; each
  destination's sources stay in draw order;
* features of a type with a width ``F_t > 0`` are ``(mu_t[z] + feature_noise * eps) / s`` with
  one centroid per community ``mu_t[c] ~ N(0, I)`` (unit variance, float32); a type of width 0
  has no features (models give it a learnable embedding);
* labels of the target type are the communities, a ``label_noise`` share redrawn uniformly;
  splits are random (each node's own uniform draw against the split fractions).

Times (``time_horizon > 0``, the ``mag-temporal-like`` preset: ``mag-like`` with times): every
node of every type gets a node time and every draw an edge time, each uniform in
``[0, time_horizon)`` from its own Philox streams; each destination's in-edges of a relation
are then sorted by time (equal times in draw order), as the typed format requires. So for one
seed the features, labels, splits, ``indptr`` and each destination's sources (as a multiset)
equal the untimed preset's, and the untimed presets' arrays are those they always were. The
times carry no signal about the labels: they exercise the format, the typed temporal sampler
and the training refusals.

Features alone name a paper's community only in part (``feature_noise``); its cited papers, its
authors' other papers and its topics' papers share it with probability ``homophily``, so a model
that aggregates over the relations beats one that sees the features alone.

Determinism and memory, as :mod:`~fleetgnn.graph.synthetic.homogeneous`: every random number
comes from a Philox stream keyed by ``(seed, stream, block)`` over fixed-size blocks, so the
arrays do not depend on ``chunk_edges``; each relation's CSC is built by regenerating its draws
twice (count, then place at each destination's cursor), holding ``O(N_dst)`` counters plus one
chunk; features, labels and masks are written in blocks into ``.npy`` memory maps.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fleetgnn.errors import DatasetError, GraphError
from fleetgnn.graph.csc import append_to_segments, index_dtype
from fleetgnn.graph.csc_passes import sort_segments_by_time
from fleetgnn.graph.dataset import DatasetWriter, relation_key
from fleetgnn.graph.hetero import HeteroSchema
from fleetgnn.graph.synthetic.common import (
    EDGE_BLOCK,
    NODE_BLOCK,
    Progress,
    Ticker,
    blocks,
    is_real,
    philox,
    split_masks,
    write_features,
    write_labels,
)

__all__ = ["TypedSyntheticSpec", "write"]

# Philox stream IDs (first element of the spawn key), apart from the homogeneous generator's
_SPLIT_STREAM = 100
_LABEL_STREAM = 101
_CENTROID_STREAM = 200  # + type index
_FEATURE_STREAM = 300  # + type index
_EDGE_STREAM = 1000  # + relation index
_NODE_TIME_STREAM = 400  # + type index
_EDGE_TIME_STREAM = 2000  # + relation index
#: Bumped whenever the output for a given spec and seed changes.
GENERATOR_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TypedSyntheticSpec:
    """The shape and statistics of a synthetic typed graph.

    Args:
        node_types: ``(name, count, feature width)`` per type; width 0: no features.
        relations: ``(src, name, dst, draws)`` per relation (``draws`` = stored edges).
        target: The labelled type.
        num_classes: Classes (and communities) ``C`` of the target type.
        train_frac: Expected share of target nodes in the train split.
        val_frac: Expected share in the validation split.
        test_frac: Expected share in the test split (the three sum to <= 1).
        homophily: Probability that a draw's source shares its destination's community.
        feature_noise: Noise standard deviation around the unit-variance centroids (>= 0).
        label_noise: Probability that a target label is redrawn uniformly.
        skew: Exponent ``>= 1`` of the ID law ``floor(N * u ** skew)`` (1: uniform degrees).
        name: Dataset name.
        time_horizon: With ``T > 0``, node times of every type and edge times of every relation,
            uniform in ``[0, T)``; ``0``: no times.
    """

    node_types: tuple[tuple[str, int, int], ...]
    relations: tuple[tuple[str, str, str, int], ...]
    target: str
    num_classes: int
    train_frac: float
    val_frac: float
    test_frac: float
    homophily: float
    feature_noise: float
    label_noise: float = 0.0
    skew: float = 2.0
    name: str = "typed-synthetic"
    time_horizon: int = 0

    def __post_init__(self) -> None:
        if int(self.num_classes) < 1:
            raise DatasetError(f"'num_classes' must be >= 1 (got {self.num_classes!r})")
        for key in ("train_frac", "val_frac", "test_frac", "homophily", "label_noise"):
            v = getattr(self, key)
            if not is_real(v) or not 0.0 <= float(v) <= 1.0:
                raise DatasetError(f"'{key}' must be in [0, 1] (got {v!r})")
        if self.train_frac + self.val_frac + self.test_frac > 1.0 + 1e-9:
            raise DatasetError("'train_frac' + 'val_frac' + 'test_frac' must be <= 1")
        if not is_real(self.feature_noise) or self.feature_noise < 0:
            raise DatasetError(f"'feature_noise' must be >= 0 (got {self.feature_noise!r})")
        if not is_real(self.skew) or self.skew < 1:
            raise DatasetError(f"'skew' must be >= 1 (got {self.skew!r})")
        h = self.time_horizon
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 0 <= h < 1 << 62:
            raise DatasetError(f"'time_horizon' must be an integer >= 0 (got {h!r})")
        for t, n, f in self.node_types:
            if int(n) < 1 or int(f) < 0:
                raise DatasetError(f"node type {t!r}: count must be >= 1 and width >= 0")
        for rel in self.relations:
            if int(rel[3]) < 0:
                raise DatasetError(f"relation {rel[:3]}: draws must be >= 0 (got {rel[3]})")
        try:
            self.schema()
        except GraphError as err:
            raise DatasetError(f"typed synthetic spec {self.name!r}: {err}") from err

    def scaled(self, preset: str, scale: float) -> TypedSyntheticSpec:
        """This spec with every node and edge count scaled (a type keeps >= 1 node).

        Named ``preset@scale``.
        """
        return dataclasses.replace(
            self,
            node_types=tuple((t, max(1, round(n * scale)), f) for t, n, f in self.node_types),
            relations=tuple((s, r, d, round(e * scale)) for s, r, d, e in self.relations),
            name=f"{preset}@{scale:g}",
        )

    def schema(self) -> HeteroSchema:
        """The typed graph's schema."""
        return HeteroSchema(
            node_types=tuple(t for t, _, _ in self.node_types),
            num_nodes=tuple(int(n) for _, n, _ in self.node_types),
            relations=tuple((s, r, d) for s, r, d, _ in self.relations),
            target=self.target,
        )


def _ids(n: int, u: np.ndarray, skew: float) -> np.ndarray:
    """``floor(n * u ** skew)``, clipped to ``[0, n)``."""
    return np.minimum((n * u**skew).astype(np.int64), n - 1)


def _draws(
    spec: TypedSyntheticSpec, seed: int, rid: int, n_src: int, n_dst: int, lo_blk: int, hi_blk: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of relation ``rid``'s draws in blocks ``[lo_blk, hi_blk)``."""
    e = int(spec.relations[rid][3])
    c = int(spec.num_classes)
    srcs, dsts = [], []
    for b in range(lo_blk, hi_blk):
        m = min(EDGE_BLOCK, e - b * EDGE_BLOCK)
        u = philox(seed, _EDGE_STREAM + rid, b).random((3, m))
        dst = _ids(n_dst, u[0], spec.skew)
        comm = dst % c
        count = (n_src - comm + c - 1) // c  # sources of the destination's community
        inside = (u[1] < spec.homophily) & (count > 0)
        k = np.minimum((count * u[2] ** spec.skew).astype(np.int64), np.maximum(count - 1, 0))
        src = np.where(inside, comm + c * k, _ids(n_src, u[2], spec.skew))
        srcs.append(src)
        dsts.append(dst)
    if not srcs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(srcs), np.concatenate(dsts)


def _draw_times(
    spec: TypedSyntheticSpec, seed: int, rid: int, lo_blk: int, hi_blk: int
) -> np.ndarray:
    """int64 edge times of relation ``rid``'s draws in blocks ``[lo_blk, hi_blk)``."""
    e, h = int(spec.relations[rid][3]), int(spec.time_horizon)
    out = []
    for b in range(lo_blk, hi_blk):
        m = min(EDGE_BLOCK, e - b * EDGE_BLOCK)
        u = philox(seed, _EDGE_TIME_STREAM + rid, b).random(m)
        out.append(np.minimum((u * h).astype(np.int64), h - 1))
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def write(
    out: str | os.PathLike[str],
    spec: TypedSyntheticSpec,
    *,
    preset: str,
    scale: float,
    seed: int,
    overwrite: bool,
    chunk_edges: int,
    progress: Progress | None,
    feature_dtype: str | dict[str, str] | None,
) -> Path:
    """Generate ``spec`` straight into a typed dataset directory (checked ``seed``, chunk size).

    ``meta.json`` records ``source="synthetic"``, ``preset``, ``scale``, ``seed``, the
    ``generator_version`` and, for a timed spec, ``time_horizon``. ``feature_dtype`` stores the
    feature tables compact (:class:`~fleetgnn.graph.dataset.DatasetWriter`'s: one dtype, or
    per type); the float32 draws are unchanged. ``progress`` counts draws (twice per relation,
    three times when timed) plus feature rows (and node times).

    Memory: per relation ``16 * N_dst`` bytes of counters plus about ``60 * chunk_edges``
    bytes of draws; features, labels, masks and edges go through ``.npy`` memory maps.
    """
    blocks_per_step = max(1, chunk_edges // EDGE_BLOCK)
    schema = spec.schema()
    counts = dict(zip(schema.node_types, schema.num_nodes, strict=True))
    timed = int(spec.time_horizon) > 0
    total = sum((3 if timed else 2) * int(r[3]) for r in spec.relations)
    total += sum(int(n) for _, n, f in spec.node_types if f)
    total += sum(int(n) for _, n, _ in spec.node_types) if timed else 0
    tick = Ticker(total, progress)
    with DatasetWriter(
        out, name=spec.name, overwrite=overwrite, feature_dtype=feature_dtype, schema=schema
    ) as w:
        for rid, (s, r, d, e) in enumerate(spec.relations):
            n_src, n_dst, e = counts[s], counts[d], int(e)
            nblk = -(-e // EDGE_BLOCK)
            steps = [(b, min(nblk, b + blocks_per_step)) for b in range(0, nblk, blocks_per_step)]
            deg = np.zeros(n_dst, dtype=np.int64)
            for lo, hi in steps:  # pass 1: in-degrees
                _, dst = _draws(spec, seed, rid, n_src, n_dst, lo, hi)
                deg += np.bincount(dst, minlength=n_dst)
                tick(dst.size)
            indptr = np.zeros(n_dst + 1, dtype=np.int64)
            np.cumsum(deg, out=indptr[1:])
            del deg
            key = relation_key((s, r, d))
            w.put(f"rel/{key}/indptr", indptr)
            indices = w.create(f"rel/{key}/indices", index_dtype(n_src), (e,))
            times = w.create(f"rel/{key}/edge_time", np.int64, (e,)) if timed else None
            cursor = indptr[:-1].copy()
            for lo, hi in steps:  # pass 2: the same draws, placed at their destination
                src, dst = _draws(spec, seed, rid, n_src, n_dst, lo, hi)
                if times is not None:  # at the same places: a copy of the cursors before
                    at = cursor.copy()
                    append_to_segments(times, at, dst, _draw_times(spec, seed, rid, lo, hi))
                append_to_segments(indices, cursor, dst, src)
                tick(dst.size)
            if times is not None:  # pass 3: each destination's in-edges by time, stably
                chunk = blocks_per_step * EDGE_BLOCK
                sort_segments_by_time(indptr, times, [indices], chunk, tick=tick)
            del cursor, indptr
        _write_node_data(spec, seed, w, tick)
        if timed:
            _write_node_times(spec, seed, w, tick)
        extra = {"time_horizon": int(spec.time_horizon)} if timed else {}
        return w.commit(
            num_classes=int(spec.num_classes),
            source="synthetic",
            preset=preset,
            scale=float(scale),
            seed=seed,
            generator_version=GENERATOR_VERSION,
            **extra,
        )


def _write_node_times(
    spec: TypedSyntheticSpec, seed: int, w: DatasetWriter, tick: Callable[[int], None]
) -> None:
    """``node_time/TYPE`` of every type: uniform in ``[0, time_horizon)``, in node blocks."""
    h = int(spec.time_horizon)
    for ti, (t, n, _) in enumerate(spec.node_types):
        n = int(n)
        out = w.create(f"node_time/{t}", np.int64, (n,))
        for b, lo, hi in blocks(n, NODE_BLOCK):
            u = philox(seed, _NODE_TIME_STREAM + ti, b).random(hi - lo)
            out[lo:hi] = np.minimum((u * h).astype(np.int64), h - 1)
            tick(hi - lo)


def _write_node_data(
    spec: TypedSyntheticSpec, seed: int, w: DatasetWriter, tick: Callable[[int], None]
) -> None:
    c = int(spec.num_classes)
    s = 1.0 / math.sqrt(1.0 + float(spec.feature_noise) ** 2)

    def community(lo: int, hi: int) -> np.ndarray:  # node v of any type is in community v mod C
        return np.arange(lo, hi, dtype=np.int64) % c

    for ti, (t, n, f) in enumerate(spec.node_types):
        n, f = int(n), int(f)
        if not f:
            continue
        mu = philox(seed, _CENTROID_STREAM + ti, 0).standard_normal((c, f), dtype=np.float32)
        mu *= np.float32(s)
        x = w.create(f"x/{t}", np.float32, (n, f))
        noise = np.float32(spec.feature_noise * s)
        write_features(x, mu, noise, community, seed, _FEATURE_STREAM + ti, tick)
    n = dict((t, int(k)) for t, k, _ in spec.node_types)[spec.target]

    def redraw(u: np.ndarray) -> np.ndarray:  # uniform over the classes
        return np.minimum((u * c).astype(np.int64), c - 1)

    write_labels(
        w.create("y", np.int64, (n,)), community, spec.label_noise, redraw, seed, _LABEL_STREAM
    )
    masks = {m: w.create(m, np.bool_, (n,)) for m in ("train_mask", "val_mask", "test_mask")}
    fracs = (spec.train_frac, spec.val_frac, spec.test_frac)
    for b, lo, hi in blocks(n, NODE_BLOCK):
        split_masks(masks, lo, hi, philox(seed, _SPLIT_STREAM, b).random(hi - lo), fracs)
