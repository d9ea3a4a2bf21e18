"""Synthetic graphs with learnable labels, of every kind, behind one API.

=========================  ===================================================================
name                       what
=========================  ===================================================================
:data:`PRESETS`            every named preset, of every kind (:mod:`.presets`)
:func:`spec_for`           a preset's spec, its sizes scaled
:func:`prepare_synthetic`  a preset or spec written into a dataset directory, in bounded memory
:func:`generate_graph`     a homogeneous or temporal spec generated in memory
:func:`generator_version`  the version of the generator behind a preset or spec (cache keys)
=========================  ===================================================================

A spec's class picks its generator: :class:`SyntheticSpec` the degree-corrected block model
(:mod:`.homogeneous`), :class:`TemporalSpec` the same with times and drifting communities
(:mod:`.temporal`), :class:`TypedSyntheticSpec` the typed planted-community model
(:mod:`.typed`). What they share (keyed random streams, block writers, CSC passes, sinks) is in
:mod:`.common`. Every generator is deterministic per seed and independent of ``chunk_edges``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from fleetgnn.errors import DatasetError
from fleetgnn.graph.csc import Graph
from fleetgnn.graph.dataset import DatasetWriter
from fleetgnn.graph.synthetic import homogeneous, temporal, typed
from fleetgnn.graph.synthetic.common import (
    DiskSink,
    MemorySink,
    Progress,
    check_chunk_edges,
    check_seed,
)
from fleetgnn.graph.synthetic.homogeneous import SyntheticSpec, class_probabilities
from fleetgnn.graph.synthetic.presets import PRESETS, Spec, spec_for
from fleetgnn.graph.synthetic.temporal import TemporalSpec, temporal_communities
from fleetgnn.graph.synthetic.typed import TypedSyntheticSpec

__all__ = [
    "PRESETS",
    "Spec",
    "SyntheticSpec",
    "TemporalSpec",
    "TypedSyntheticSpec",
    "class_probabilities",
    "generate_graph",
    "generator_version",
    "prepare_synthetic",
    "spec_for",
    "temporal_communities",
]


def generator_version(preset: str | Spec) -> int:
    """The version of the generator behind ``preset`` (a name of :data:`PRESETS`, or a spec).

    Each generator bumps its version whenever its output for a given spec and seed changes, so
    a cache keyed by it never reuses a stale dataset.

    Raises:
        DatasetError: An unknown preset name.
    """
    spec = spec_for(preset) if isinstance(preset, str) else preset
    if isinstance(spec, TemporalSpec):
        return temporal.GENERATOR_VERSION
    if isinstance(spec, TypedSyntheticSpec):
        return typed.GENERATOR_VERSION
    return homogeneous.GENERATOR_VERSION


def _in_memory() -> str:
    return ", ".join(p for p, s in PRESETS.items() if not isinstance(s, TypedSyntheticSpec))


def generate_graph(
    spec: SyntheticSpec | TemporalSpec, seed: int = 0, *, chunk_edges: int = 4_000_000
) -> Graph:
    """Generate a homogeneous or temporal synthetic graph in memory (tests and small scales).

    Args:
        spec: What to generate (see :data:`PRESETS` and :func:`spec_for`).
        seed: Random seed (>= 0); the same seed gives bit-identical arrays.
        chunk_edges: Edges processed per step; affects memory and speed only, never the result.

    Returns:
        A validated :class:`Graph` with float32 features ``x``, int64 labels ``y`` and the three
        split masks. From a :class:`SyntheticSpec`: symmetric, without self loops or duplicate
        edges (with ``edge_attr`` when the spec has edge features); from a
        :class:`TemporalSpec`: with ``edge_time`` and ``node_time``.

    Raises:
        DatasetError: A typed spec (generated to disk only), something else than a spec, or an
            invalid ``seed`` or ``chunk_edges``.
    """
    if isinstance(spec, TypedSyntheticSpec):
        raise DatasetError(
            f"typed spec {spec.name!r} is generated to disk only: call "
            f"prepare_synthetic(out, spec) and open the result with open_dataset(out)"
        )
    if not isinstance(spec, (SyntheticSpec, TemporalSpec)):
        raise DatasetError(
            f"'spec' must be a SyntheticSpec or a TemporalSpec (got {type(spec).__name__}); "
            f"build one with spec_for(preset, scale), valid presets: {_in_memory()}"
        )
    seed = check_seed(seed)
    sink = MemorySink()
    generate = temporal.generate if isinstance(spec, TemporalSpec) else homogeneous.generate
    generate(spec, seed, check_chunk_edges(chunk_edges), sink, None)
    return Graph(num_classes=int(spec.num_classes), name=spec.name, **sink.arrays)


def prepare_synthetic(
    out: str | os.PathLike[str],
    preset: str | Spec = "small",
    scale: float = 1.0,
    seed: int = 0,
    overwrite: bool = False,
    chunk_edges: int = 4_000_000,
    progress: Progress | None = None,
    edge_features: int = 0,
    feature_dtype: str | dict[str, str] | None = None,
) -> Path:
    """Generate a synthetic preset or spec of any kind into a dataset directory, bounded in memory.

    The preset's kind picks the generator and the directory's format: a homogeneous or temporal
    dataset (open it with :func:`~fleetgnn.graph.open_dataset`; its arrays equal
    :func:`generate_graph`'s for the same spec and seed) or a typed one
    (:func:`~fleetgnn.graph.open_dataset`). ``meta.json`` records
    ``source="synthetic"``, ``preset``, ``scale`` and ``seed``; homogeneous and temporal
    datasets the full ``spec``, temporal and typed ones their ``generator_version``.

    Memory: the node tables (about ``30 * num_nodes`` bytes homogeneous, ``25 * phases *
    num_nodes`` temporal, ``16 * N_dst`` per relation typed) plus about ``60 * chunk_edges``
    bytes of working arrays; labels, masks, features and edges go through ``.npy`` memory maps.
    Disk: the dataset, plus (homogeneous) a scratch edge array the size of ``indices``.

    Args:
        out: Target dataset directory (must not exist unless ``overwrite``).
        preset: A name of :data:`PRESETS`, or a spec of any kind.
        scale: Size factor of a named preset (see :func:`spec_for`); must be 1 with a spec.
        seed: Random seed (>= 0).
        overwrite: Replace an existing dataset at ``out`` once the new one is complete.
        chunk_edges: Edges held in memory per step (>= 1); affects memory and speed only, never
            the result.
        progress: Called as ``progress(done, total)`` after each step; units are edge slots
            per pass plus feature rows, and ``done`` reaches ``total`` at the end.
        edge_features: Width of the edge features to draw (``SyntheticSpec.edge_features``;
            0: none, or the spec's own). Static homogeneous presets only.
        feature_dtype: Store the features compact (:class:`~fleetgnn.graph.DatasetWriter`'s
            ``feature_dtype``); a typed preset also takes one dtype per node type (a dict).

    Returns:
        The dataset directory.

    Raises:
        DatasetError: Unknown preset, invalid scale/seed/chunk size, edge features or a dtype
            per node type for a kind without them, or ``out`` already exists.
    """
    if isinstance(preset, (SyntheticSpec, TemporalSpec, TypedSyntheticSpec)):
        if scale != 1.0:
            raise DatasetError(
                f"'scale' applies to named presets only (got scale={scale!r} with a "
                f"{type(preset).__name__}); scale the spec's node and edge counts instead"
            )
        spec, name = preset, preset.name
    else:
        spec, name = spec_for(preset, scale), str(preset)
    if edge_features:
        if not isinstance(spec, SyntheticSpec):
            static = ", ".join(p for p, s in PRESETS.items() if isinstance(s, SyntheticSpec))
            raise DatasetError(
                f"'edge_features' applies to the static homogeneous presets only ({static}); "
                f"{name!r} draws none"
            )
        spec = dataclasses.replace(spec, edge_features=edge_features)
    seed = check_seed(seed)
    chunk_edges = check_chunk_edges(chunk_edges)
    if isinstance(spec, TypedSyntheticSpec):
        return typed.write(
            out,
            spec,
            preset=name,
            scale=scale,
            seed=seed,
            overwrite=overwrite,
            chunk_edges=chunk_edges,
            progress=progress,
            feature_dtype=feature_dtype,
        )
    if isinstance(feature_dtype, dict):
        raise DatasetError(
            f"'feature_dtype' per node type applies to typed presets only ({name!r} has one "
            f"node type): give one dtype, e.g. 'bf16'"
        )
    if isinstance(spec, TemporalSpec):
        generate, extra = temporal.generate, {"generator_version": temporal.GENERATOR_VERSION}
    else:
        generate, extra = homogeneous.generate, {}
    with DatasetWriter(
        out, name=spec.name, overwrite=overwrite, feature_dtype=feature_dtype
    ) as writer:
        generate(spec, seed, chunk_edges, DiskSink(writer), progress)
        return writer.commit(
            num_classes=int(spec.num_classes),
            source="synthetic",
            preset=name,
            scale=float(scale),
            seed=seed,
            spec=dataclasses.asdict(spec),
            **extra,
        )
