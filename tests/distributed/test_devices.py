"""The device contract: which device and backend ``init`` picks, and the collectives' device check.

CUDA is faked (``torch.cuda.is_available``/``device_count`` patched) where only the choice is
tested; nothing here needs a GPU.
"""

import pytest
import torch

from fleetgnn.distributed import DistError, destroy, init
from fleetgnn.distributed.comm import served_devices
from fleetgnn.distributed.context import HYBRID_BACKEND, _pg_backend, resolve_device_type
from fleetgnn.distributed.testing import context_of, run_world


@pytest.fixture
def fake_cuda(monkeypatch):
    """A machine that says it has CUDA (``n`` GPUs: set ``fake_cuda.count``)."""

    class Fake:
        count = 1

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: Fake.count)
    return Fake


def test_device_choice_where_cuda_exists(fake_cuda):
    assert resolve_device_type("cpu") == "cpu"  # cpu means cpu, also where CUDA exists
    assert resolve_device_type(None, "gloo") == "cpu"
    assert resolve_device_type("auto") == "cuda"
    assert resolve_device_type(None) == "cuda"
    assert resolve_device_type("cuda") == "cuda"
    assert resolve_device_type(None, "nccl") == "cuda"
    with pytest.raises(DistError, match="NCCL moves CUDA tensors only"):
        resolve_device_type("cpu", "nccl")


def test_device_choice_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device_type("auto") == "cpu"
    assert resolve_device_type(None) == "cpu"
    for device, backend in (("cuda", None), (None, "nccl"), ("cuda", "gloo")):
        with pytest.raises(DistError, match="needs CUDA, which is not available") as e:
            resolve_device_type(device, backend)
        assert "\n" not in str(e.value)
    with pytest.raises(DistError, match="valid devices are auto, cpu, cuda"):
        resolve_device_type("tpu")
    with pytest.raises(DistError, match="valid backends are gloo, nccl"):
        resolve_device_type("cpu", "mpi")


def test_backend_per_gpu_count(fake_cuda):
    fake_cuda.count = 2
    assert _pg_backend("cpu", None, 4) == "gloo"
    # one GPU per local rank: NCCL for device tensors, gloo for host-side ones
    assert _pg_backend("cuda", None, 2) == HYBRID_BACKEND == "cpu:gloo,cuda:nccl"
    assert _pg_backend("cuda", "nccl", 1) == HYBRID_BACKEND
    # more local ranks than GPUs: the shared-GPU mode, gloo (NCCL refuses it)
    assert _pg_backend("cuda", None, 3) == "gloo"
    assert _pg_backend("cuda", "gloo", 2) == "gloo"
    with pytest.raises(DistError, match="NCCL refuses two ranks on one device") as e:
        _pg_backend("cuda", "nccl", 3)
    assert "backend=None" in str(e.value) and "\n" not in str(e.value)


def test_served_devices():
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert served_devices("gloo", cpu) == {"cpu"}
    assert served_devices("gloo", gpu) == {"cpu", "cuda"}  # shared-GPU mode
    assert served_devices("nccl", gpu) == {"cuda"}
    assert served_devices("cpu:gloo,cuda:nccl", gpu) == {"cpu", "cuda"}


def test_cpu_device_runs_on_cpu_where_cuda_exists(no_launcher, fake_cuda):
    """``train.device=cpu`` on a CUDA machine: a gloo group on the CPU, engines on the CPU."""
    from fleetgnn.config import MinibatchEngineConfig
    from fleetgnn.engines import build_engine
    from fleetgnn.graph.synthetic import generate_graph, spec_for
    from fleetgnn.nn import build_model

    ctx = init(device="cpu")
    try:
        assert ctx.device == torch.device("cpu") and ctx.backend == "gloo"
        assert not ctx.shares_device and ctx.communicator().device == torch.device("cpu")
        graph = generate_graph(spec_for("tiny", 0.2), seed=0)
        model = build_model("sage", graph.num_features, graph.num_classes, num_layers=2)
        cfg = MinibatchEngineConfig(device="cpu", fanouts=(3, 3), batch_size=64)
        with build_engine(model, graph, cfg, ctx) as engine:
            assert engine.device == torch.device("cpu")
            stats = engine.run_epoch(0, 0, lambda *_: None)
            assert stats and all(p.device.type == "cpu" for p in engine.module.parameters())
        # a config that asks for another device than the group's is refused in one line
        with pytest.raises(Exception, match="device='cuda' but its process group runs on cpu"):
            build_engine(model, graph, cfg.replace(device="cuda"), ctx)
    finally:
        destroy(ctx)


def test_config_records_the_device_that_ran(fake_cuda, monkeypatch):
    from fleetgnn.train import load_config, resolve_device_name

    cfg = resolve_device_name(load_config(None, ["train.device=cpu"]))
    assert cfg.train.device == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = resolve_device_name(load_config(None, ["train.device=auto"]))
    assert cfg.train.device == "cpu"


# ---------------------------------------------------------------------------------------------
# the collectives' device check


def _wrong_device_world(comm):
    """Every collective given a ``meta`` tensor: each raises one line; the group stays usable."""
    lines = {}
    meta = torch.empty(4, 2, device="meta")
    calls = {
        "all_reduce_sum": lambda: comm.all_reduce_sum(meta),
        "all_reduce": lambda: comm.all_reduce(meta, "max"),
        "all_gather": lambda: comm.all_gather(meta),
        "broadcast": lambda: comm.broadcast(meta),
        "all_to_all": lambda: comm.all_to_all(meta, [2] * comm.world_size, recv_counts=[2] * 2),
    }
    for name, call in calls.items():
        try:
            call()
        except DistError as e:
            lines[name] = str(e)
    # a host tensor still works afterwards: the check fired before any rank communicated
    ok = comm.all_reduce_sum(torch.ones(2, dtype=torch.float64)).tolist()
    return lines, ok


@pytest.mark.slow
def test_collective_device_check_fires_in_one_line():
    results = run_world(_wrong_device_world, 2, debug=True)
    for lines, ok in results:
        assert ok == [2.0, 2.0]
        assert set(lines) == {
            "all_reduce_sum",
            "all_reduce",
            "all_gather",
            "broadcast",
            "all_to_all",
        }
        for name, line in lines.items():
            assert "\n" not in line
            assert line.startswith(f"{name}: a tensor on meta")
            assert "which takes tensors on the CPU (backend 'gloo')" in line
            assert "test_devices.py" in line  # the calling line, not the communicator's


def _context_world(comm):
    ctx = context_of(comm)
    return str(ctx.device), str(ctx.communicator().device), ctx.shares_device


@pytest.mark.slow
def test_run_world_context_is_on_the_ranks_device():
    assert run_world(_context_world, 2) == [("cpu", "cpu", False)] * 2


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_shared_gpu_collectives():
    """Two ranks on one GPU (gloo): device tensors through every collective, equal to the CPU."""
    assert all(run_world(_shared_gpu_world, 2, device="cuda"))


def _shared_gpu_world(comm):
    dev = comm.device
    assert dev.type == "cuda"
    t = torch.full((3,), float(comm.rank + 1), device=dev, dtype=torch.float64)
    comm.all_reduce_sum(t)
    gathered = comm.all_gather(torch.tensor([comm.rank], device=dev))
    x = torch.arange(4, dtype=torch.float64, device=dev).reshape(2, 2) + 10 * comm.rank
    out, recv = comm.all_to_all(x, [1, 1])
    host = comm.all_reduce_sum(torch.tensor([1], dtype=torch.int64))  # host-side counter
    return (
        t.device == dev
        and t.tolist() == [3.0, 3.0, 3.0]
        and [int(g) for g in gathered] == [0, 1]
        and out.device == dev
        and recv == [1, 1]
        and out[:, 0].tolist() == [2.0 * comm.rank, 10 + 2.0 * comm.rank]
        and host.tolist() == [2]
    )
