from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fleetgnn.graph import Graph, from_edges
from fleetgnn.graph.loaders.bundled import DATA_DIR

DATASETS = DATA_DIR  # planetoid/ and npz/: the Cora that ships with fleetgnn


def random_graph(seed: int, n: int, e: int, *, hub: bool = False, features: bool = True) -> Graph:
    """A random directed multigraph with self loops, optional hub (skewed in-degree) and data."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, max(n, 1), e)
    dst = rng.integers(0, max(n, 1), e)
    if hub and n:
        dst[: e // 3] = 0  # one node with a large in-degree
    data = {}
    if features and n:
        data = {
            "x": rng.standard_normal((n, 3)),
            "y": rng.integers(0, 4, n),
            "train_mask": rng.random(n) < 0.4,
        }
    return from_edges(
        src[: e if n else 0],
        dst[: e if n else 0],
        n,
        edge_weight=rng.random(e if n else 0),
        node_data=data,
        num_classes=4 if data else None,
    )


def community_graph(
    num_blocks: int, block_size: int, *, p_in: float = 0.3, cross: int = 20, seed: int = 0
) -> tuple[Graph, np.ndarray]:
    """Dense random blocks with a few cross edges, node IDs shuffled; returns (graph, block_of)."""
    rng = np.random.default_rng(seed)
    n = num_blocks * block_size
    block = np.repeat(np.arange(num_blocks), block_size)
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    same = (block[a] == block[b]) & (a != b) & (rng.random((n, n)) < p_in)
    src, dst = np.nonzero(same)
    cs = rng.integers(0, n, cross)
    cd = rng.integers(0, n, cross)
    src = np.concatenate([src, cs, cd])
    dst = np.concatenate([dst, cd, cs])
    shuffle = rng.permutation(n)  # hide the blocks from ID order
    return from_edges(shuffle[src], shuffle[dst], n), block[np.argsort(shuffle)]


@pytest.fixture
def datasets_dir() -> Path:
    return DATASETS


@pytest.fixture(scope="session")
def graphs() -> SimpleNamespace:
    """Graph builders (a session fixture, so hypothesis tests can use them)."""
    return SimpleNamespace(random=random_graph, community=community_graph)
