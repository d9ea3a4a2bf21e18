"""The temporal-like preset: deterministic, chunking-free, timed CSC, communities that drift."""

import dataclasses
import hashlib

import numpy as np
import pytest

from fleetgnn.cli.main import main
from fleetgnn.errors import DatasetError
from fleetgnn.graph import open_dataset
from fleetgnn.graph.dataset import read_meta
from fleetgnn.graph.synthetic import (
    TemporalSpec,
    generate_graph,
    prepare_synthetic,
    spec_for,
    temporal_communities,
)

SPEC = spec_for("temporal-like", 0.003)  # 3,000 nodes, 60,000 edges


@pytest.fixture(scope="module")
def graph():
    return generate_graph(SPEC, seed=4)


def test_deterministic_and_independent_of_chunking(graph, same_graph):
    same_graph(graph, generate_graph(SPEC, seed=4, chunk_edges=40_000))
    other = generate_graph(SPEC, seed=5)
    assert not np.array_equal(other.edge_time[:100], graph.edge_time[:100])


def test_disk_equals_memory(tmp_path, graph, same_graph):
    out = prepare_synthetic(tmp_path / "tl", "temporal-like", scale=0.003, seed=4)
    same_graph(graph, open_dataset(out))
    meta = read_meta(out)
    assert meta["has_edge_time"] and meta["spec"]["phases"] == SPEC.phases
    assert meta["edge_time_range"] == [int(graph.edge_time.min()), int(graph.edge_time.max())]
    assert meta["has_node_time"] and meta["node_time_range"] == [
        int(graph.node_time.min()),
        int(graph.node_time.max()),
    ]


def test_timed_csc_shape(graph):
    t, ptr = graph.edge_time, graph.indptr
    assert t.dtype == np.int64 and 0 <= t.min() and t.max() < SPEC.num_times
    # sorted by (time, source) within each segment, no self loops; both directions of a draw
    for v in range(0, graph.num_nodes, 97):
        seg = slice(ptr[v], ptr[v + 1])
        key = t[seg] * graph.num_nodes + graph.indices[seg]
        assert (np.diff(key) >= 0).all()
    assert not (graph.indices == graph.dst_of_edges()).any()
    fwd = set(zip(graph.indices.tolist(), graph.dst_of_edges().tolist(), t.tolist()))
    assert all((d, s, x) in fwd for s, d, x in list(fwd)[:2000])
    deg = graph.in_degrees()
    assert deg.max() > 8 * deg.mean()  # power law: hubs


def test_communities_drift_and_edges_follow_them(graph):
    z0, z1, switch = temporal_communities(SPEC, seed=4)
    moved = z0 != z1
    assert 0.4 < moved.mean() < 0.6  # drift = 0.5
    assert (switch[~moved] == SPEC.num_times).all()
    assert ((switch[moved] > 0) & (switch[moved] < SPEC.num_times)).all()
    src, dst, t = graph.indices, graph.dst_of_edges(), graph.edge_time

    def community(v, at):
        return np.where(at >= switch[v], z1[v], z0[v])

    m = moved[dst]
    before, after = m & (t < switch[dst]), m & (t >= switch[dst])
    same_old = community(src, t) == z0[dst]
    same_new = community(src, t) == z1[dst]
    # a moved node's edges before its switch follow its old community, after it its new one
    assert same_old[before].mean() > 0.7 and same_new[before].mean() < 0.1
    assert same_new[after].mean() > 0.7 and same_old[after].mean() < 0.1
    # labels are the final communities (up to label noise), features the first ones
    assert (graph.y == z1).mean() > 0.9
    assert (graph.y[moved] == z0[moved]).mean() < 0.1


def test_spec_checks_and_cli(tmp_path, capsys):
    with pytest.raises(DatasetError, match="'drift' must be a probability"):
        dataclasses.replace(SPEC, drift=1.5)
    with pytest.raises(DatasetError, match="'phases' .* must be <= 'num_times'"):
        TemporalSpec(SPEC.base, num_times=3, phases=4)
    out = tmp_path / "tl"
    argv = ["prepare", "synthetic", "--preset", "temporal-like", "--scale", "0.002"]
    assert main([*argv, "--out", str(out)]) == 0
    g = open_dataset(out)
    assert g.edge_time is not None and g.num_nodes == 2000
    capsys.readouterr()
    assert main([*argv, "--edge-features", "2", "--out", str(tmp_path / "x")]) == 2
    assert "--edge-features applies to the static" in capsys.readouterr().err


#: sha256 of the integer arrays (indptr, indices, edge_time, y, masks) of SPEC at seed 4 as the
#: generator wrote them before it wrote node times (version 1): adding them changed none.
ARRAYS_V1 = "00467a5a89564688a2c4ccd300deab08ff56f6656c28bf431e6adaf68ca3d850"


def test_node_times_are_the_switch_times_and_the_rest_is_unchanged(graph):
    h = hashlib.sha256()
    for k in ("indptr", "indices", "edge_time", "y", "train_mask", "val_mask", "test_mask"):
        h.update(np.ascontiguousarray(getattr(graph, k)).tobytes())
    assert h.hexdigest() == ARRAYS_V1
    z0, z1, switch = temporal_communities(SPEC, seed=4)
    t = graph.node_time
    assert t.dtype == np.int64
    np.testing.assert_array_equal(t, switch)
    moved = z0 != z1
    assert (t[~moved] == SPEC.num_times).all()  # after every edge: a staying node sees them all
    # a moved node's in-edges before its node time point to its old community (the features'),
    # those from then on to its label's: only future edges tell its label
    dst, src, et = graph.dst_of_edges(), graph.indices, graph.edge_time
    m = moved[dst]
    src_comm = np.where(et >= switch[src], z1[src], z0[src])
    past, future = m & (et < t[dst]), m & (et >= t[dst])
    assert (src_comm[past] == graph.y[dst[past]]).mean() < 0.1
    assert (src_comm[future] == graph.y[dst[future]]).mean() > 0.7
