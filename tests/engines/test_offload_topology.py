"""The offload engine's relabelled topology as one shared file per machine (``partition=metis``)."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import fleetgnn.engines.offload as offload_module
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.offload import OffloadBudgetError
from fleetgnn.errors import DiskFullError
from fleetgnn.graph.files import owner_tag
from fleetgnn.train import engine_from_config

from .test_offload import _community_graph, _config, _expected_rows

PREFIX = ".offload-topology.tmp-"


def _topology_dirs(scratch) -> list[str]:
    return sorted(p.name for p in Path(scratch).iterdir() if p.name.startswith(PREFIX))


def _train(engine, epochs=2):
    losses, grads = [], []
    for epoch in range(epochs):
        (st,) = engine.run_epoch(epoch)
        losses.append((st.loss_sum, st.count))
        grads.append({n: p.grad.clone() for n, p in engine.module.named_parameters()})
    return losses, grads, engine.evaluate()


def _file_vs_memory(comm, scratch):
    graph, ctx = _community_graph(), context_of(comm)
    cfg = _config("gcn", ["model.hidden=8"])
    offload_module.FILE_TOPOLOGY_EDGES = 1 << 62  # this process: every rank its own copy
    with engine_from_config(cfg, graph, ctx, chunks=3, partition="metis") as mem:
        assert not isinstance(mem.indices, np.memmap)
        want = _train(mem)
        want_plan = _plan_arrays(mem.plan, comm.rank)
    assert _topology_dirs(scratch) == []
    offload_module.FILE_TOPOLOGY_EDGES = 0  # one shared file
    engine = engine_from_config(cfg, graph, ctx, chunks=3, partition="metis", scratch_dir=scratch)
    mapped = [isinstance(a, np.memmap) for a in (engine.indptr, engine.indices)]
    got = _train(engine)
    same_plan = all(
        np.array_equal(a, b) for a, b in zip(_plan_arrays(engine.plan, comm.rank), want_plan)
    )
    rows_ok = engine.rank_extra()["rows"] == _expected_rows(engine)
    during = _topology_dirs(scratch)
    leftovers = sorted(p.name for p in (Path(scratch) / during[0]).iterdir())
    comm.barrier()
    engine.close()
    comm.barrier()
    return want, got, mapped, during, _topology_dirs(scratch), same_plan, rows_ok, leftovers


def _plan_arrays(plan, r):
    """This rank's arrays of a plan view, flattened in a fixed order."""
    out = [plan.order, plan.capacity, plan.pull_counts()]
    for j in range(plan.num_batches):
        out += [plan.trans[j][r], plan.slots[j][r], plan.load[j][r], *plan.leave[j][r]]
        for k, pos, sl in plan.pulls(r, j):
            out += [np.array([k]), pos, sl]
        for s, sl in plan.incoming[j]:
            out += [np.array([s]), sl]
    return out


@pytest.mark.slow
def test_shared_topology_file_trains_bit_identically(tmp_path):
    """Two ranks: same losses, gradients and metrics as private copies; files gone on close."""
    res = run_world(_file_vs_memory, 2, str(tmp_path), timeout_s=120)
    for want, got, mapped, during, after, same_plan, rows_ok, leftovers in res:
        assert mapped == [True, True]
        assert len(during) == 1 and after == []  # one directory per machine, removed on close
        # rank 0's plan, handed over as each rank's view: the one every rank built itself
        assert same_plan and rows_ok
        assert leftovers == ["indices.npy", "indptr.npy"]  # the views were read and removed
        assert got[0] == want[0] and got[2] == want[2]
        for g_got, g_want in zip(got[1], want[1], strict=True):
            for name in g_want:
                assert torch.equal(g_got[name], g_want[name]), name
    assert res[0][3] == res[1][3]  # both ranks saw the same directory
    assert _topology_dirs(tmp_path) == []


def test_failed_setup_removes_the_files_and_stale_ones_are_swept(tmp_path, monkeypatch):
    monkeypatch.setattr(offload_module, "FILE_TOPOLOGY_EDGES", 0)
    stale = tmp_path / f"{PREFIX}{(1 << 22) + 12345}-{owner_tag()}-abcdefgh"  # no such process
    stale.mkdir()
    (stale / "indices.npy").write_bytes(b"x")
    other = tmp_path / f"{PREFIX}{os.getpid()}-{owner_tag()}-ijklmnop"  # a live owner: kept
    other.mkdir()
    graph = _community_graph(n=60)
    with pytest.raises(OffloadBudgetError):  # after the topology was written
        engine_from_config(
            _config("gcn"), graph, None, partition="metis", device_budget=64, scratch_dir=tmp_path
        )
    assert _topology_dirs(tmp_path) == [other.name]


def test_too_little_disk_is_one_line_naming_the_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(offload_module, "FILE_TOPOLOGY_EDGES", 0)
    monkeypatch.setattr(offload_module, "free_bytes", lambda _path: 1000)
    graph = _community_graph(n=60)
    need = offload_module.topology_nbytes(graph)
    with pytest.raises(DiskFullError) as err:
        engine_from_config(_config("gcn"), graph, None, partition="metis", scratch_dir=tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and f"needs {need} bytes" in msg and "scratch_dir" in msg
    assert _topology_dirs(tmp_path) == []
