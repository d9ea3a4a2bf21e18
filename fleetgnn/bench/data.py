"""Benchmark datasets: generated once into a cache, or a prepared Cora; nothing is downloaded.

- :func:`cached_dataset`: a synthetic preset (``products-like --scale 0.05`` by default) written
  with :func:`~fleetgnn.graph.synthetic.prepare_synthetic` under
  ``$XDG_CACHE_HOME/fleetgnn/bench`` and reused; the directory name carries the generator's
  :func:`~fleetgnn.graph.synthetic.generator_version`, so a new generator never reuses a stale
  one.
- :func:`cached_typed_dataset`: a typed synthetic preset (``igbh-like``) with every relation's
  reverse added (so every type receives messages), generated once into the same cache;
- :func:`cora`: Cora from a directory the user names: a prepared dataset (``fleetgnn prepare``)
  or the Planetoid ``ind.cora.*`` files (prepared once into the cache).
- :func:`cora_sized`: a synthetic graph of Cora's shape (2,708 nodes, 10,556 edges, 1,433
  features, 7 classes) when no Cora is at hand.
- :func:`random_adjacency`: a uniform random graph for the sparse kernels.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from fleetgnn.errors import DatasetError
from fleetgnn.graph import Graph, open_dataset, write_dataset
from fleetgnn.graph.hetero import HeteroGraph
from fleetgnn.graph.synthetic import (
    generate_graph,
    generator_version,
    prepare_synthetic,
    spec_for,
)
from fleetgnn.ops import Adjacency

#: Cora's shape (the Planetoid split: 140 / 500 / 1,000 labelled nodes).
CORA_SHAPE = {"num_nodes": 2708, "num_edges": 10556, "num_features": 1433, "num_classes": 7}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/fleetgnn/bench`` (``~/.cache/fleetgnn/bench`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetgnn" / "bench"


def dataset_dir(cache_dir: Path, preset: str, scale: float, seed: int = 0) -> Path:
    """Where :func:`cached_dataset` keeps a synthetic dataset (pass it to ``--dataset``)."""
    version = generator_version(preset)
    return Path(cache_dir) / f"{preset}-scale{scale:g}-seed{seed}-g{version}"


def cached_dataset(
    cache_dir: Path, preset: str = "products-like", scale: float = 0.05, seed: int = 0
) -> tuple[Graph, float]:
    """Open the cached synthetic dataset, generating it first if absent.

    Returns:
        The graph (memory-mapped) and the seconds spent generating it (0 when cached).
    """
    out = dataset_dir(cache_dir, preset, scale, seed)
    gen_s = 0.0
    if not (out / "meta.json").is_file():
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        try:
            prepare_synthetic(out, preset, scale=scale, seed=seed, overwrite=out.exists())
        except DatasetError:
            if not (out / "meta.json").is_file():  # another process may have won the race
                raise
        gen_s = time.perf_counter() - t0
    return open_dataset(out), gen_s


def typed_dataset_dir(cache_dir: Path, preset: str, scale: float, seed: int = 0) -> Path:
    """Where :func:`cached_typed_dataset` keeps a typed synthetic dataset (reverses added)."""
    version = generator_version(preset)
    return Path(cache_dir) / f"{preset}-scale{scale:g}-seed{seed}-rev-t{version}"


def cached_typed_dataset(
    cache_dir: Path, preset: str = "igbh-like", scale: float = 0.1, seed: int = 0
) -> tuple[HeteroGraph, float]:
    """Open the cached typed synthetic dataset with reverse relations, generating it if absent.

    The preset is written by :func:`~fleetgnn.graph.synthetic.prepare_synthetic`
    (``fleetgnn prepare synthetic --preset igbh-like --scale S``), then rewritten with
    :func:`~fleetgnn.graph.hetero.add_reverse_relations` (the generator's intermediate removed).

    Returns:
        The typed graph (memory-mapped) and the seconds spent generating it (0 when cached).
    """
    from fleetgnn.graph.hetero import add_reverse_relations

    out = typed_dataset_dir(cache_dir, preset, scale, seed)
    gen_s = 0.0
    if not (out / "meta.json").is_file():
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        base = out.with_name(f"{out.name}.base-{os.getpid()}")
        try:
            prepare_synthetic(base, preset, scale=scale, seed=seed, overwrite=True)
            graph = add_reverse_relations(open_dataset(base, kind="typed"))
            write_dataset(
                graph, out, overwrite=out.exists(), source=f"{preset} + reverse relations"
            )
        except DatasetError:
            if not (out / "meta.json").is_file():  # another process may have won the race
                raise
        finally:
            shutil.rmtree(base, ignore_errors=True)
        gen_s = time.perf_counter() - t0
    return open_dataset(out, kind="typed"), gen_s


def cora(path: Path, cache_dir: Path) -> Graph:
    """Cora from ``path``: a prepared dataset directory, or a directory of ``ind.cora.*`` files.

    Raises:
        DatasetError: ``path`` is neither (or its files are damaged).
    """
    path = Path(path)
    if (path / "meta.json").is_file():
        return open_dataset(path)
    if not (path / "ind.cora.graph").is_file():
        raise DatasetError(
            f"'{path}' holds neither a prepared dataset (meta.json) nor Planetoid's ind.cora.* "
            f"files; point --cora at one of them (fleetgnn prepare planetoid writes the former)"
        )
    from fleetgnn.graph.loaders import load_planetoid
    from fleetgnn.graph.loaders.planetoid import FEATURE_NORM

    out = Path(cache_dir) / "cora"
    if not (out / "meta.json").is_file():
        graph = load_planetoid(path, "cora")
        write_dataset(
            graph,
            out,
            overwrite=out.exists(),
            source="planetoid",
            root=str(path),
            feature_norm=FEATURE_NORM,
        )
    return open_dataset(out)


def cora_sized(seed: int = 0) -> Graph:
    """A synthetic graph of Cora's shape (in memory; a second or so to generate)."""
    spec = dataclasses.replace(
        spec_for("small"),
        **CORA_SHAPE,
        train_frac=0.052,
        val_frac=0.185,
        test_frac=0.369,
        name="cora-sized",
    )
    return generate_graph(spec, seed=seed)


def random_adjacency(nodes: int, edges: int, seed: int = 0) -> Adjacency:
    """A uniform random graph as an :class:`~fleetgnn.ops.Adjacency` (CSC; duplicates kept)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, nodes, (edges,), generator=g)
    dst = torch.randint(0, nodes, (edges,), generator=g)
    return Adjacency.from_edges(src, dst, nodes, nodes)


def power_law_graph(num_nodes: int, avg_degree: float, seed: int = 0) -> Graph:
    """A random CSC graph: Pareto-distributed in-degrees, uniform random sources (no features)."""
    rng = np.random.default_rng(seed)
    raw = rng.pareto(1.5, num_nodes) + 1.0
    deg = np.minimum(np.floor(raw * avg_degree / raw.mean()), num_nodes).astype(np.int64)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    indices = rng.integers(0, num_nodes, int(indptr[-1]), dtype=np.int32)
    return Graph(indptr=indptr, indices=indices, name="powerlaw", validate="structure")
