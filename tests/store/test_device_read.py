"""The store's read path on the engine's device: the same rows and counters as the host path."""

import numpy as np
import pytest
import torch

from fleetgnn.distributed.traffic import TrafficMeter
from fleetgnn.errors import GraphError
from fleetgnn.store import TierBudgets, UnifiedStore, plan_store
from fleetgnn.store.device_read import DeviceIndex, gather_on_device
from fleetgnn.store.device_topology import resolve_placement
from tests.store.test_store import RATIOS, _budgets, _graph


def _stats(store):
    return (
        store.hit_rates(),
        store.requests("features"),
        store.bytes_served("features"),
        store.reads_by_source(),
        store.traffic,
    )


@pytest.mark.parametrize("world,topology", [(1, None), (3, None), (4, "dgx1-v100")])
def test_locate_on_the_device_equals_the_plan(world, topology, device):
    g = _graph(n=200, e=1500)
    placement = None if topology is None else resolve_placement(topology, world)
    budgets = TierBudgets(device=600, host=1500)
    plan = plan_store(g, budgets, world, order="features_first", placement=placement).features
    assert plan.num_device and plan.num_host and plan.num_disk  # every tier is read
    ids = np.random.default_rng(0).integers(0, g.num_nodes, 500)
    for reader in range(world):
        want = plan.locate(ids, reader)
        index = DeviceIndex(plan, reader, torch.device(device))
        got = index.locate(torch.from_numpy(ids).to(device))
        for w, t in zip(want, got[:3], strict=True):
            assert t.device.type == device
            assert t.cpu().tolist() == w.tolist()
        code = got[3].cpu().numpy()
        assert np.array_equal(code[want[0] == 0], want[1][want[0] == 0])
        assert set(code[want[0] == 1]) <= {world} and set(code[want[0] == 2]) <= {world + 1}


@pytest.mark.parametrize("dev,host", RATIOS)
def test_device_gather_equals_the_host_path(dev, host, device):
    """Rows on the store's device, bit-exact, with every counter equal to the host path's."""
    g = _graph()
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, g.num_nodes, 300))
    ids[:10] = ids[0]  # duplicates
    b = _budgets(g, dev, host)
    cpu = UnifiedStore.build(g, None, b, meter=TrafficMeter())
    want = [cpu.gather(ids), cpu.gather(ids[:0]), cpu.gather(ids[:7].int())]
    want_stats = _stats(cpu)
    cpu.close()
    store = UnifiedStore.build(g, None, b, meter=TrafficMeter(), device=device)
    assert store.device.type == device
    read = store.gather if device != "cpu" else lambda i: gather_on_device(store, i)
    ids_dev = ids.to(device)
    got = [read(ids_dev), read(ids_dev[:0]), read(ids_dev[:7].int())]
    # every row on the one rank's device: the read through rank_of, without locating
    assert store._device_index().all_local == (dev == 1.0)
    for w, t in zip(want, got, strict=True):
        assert t.device.type == device and t.dtype == torch.float64
        assert torch.equal(t.cpu(), w)
    assert _stats(store) == want_stats
    if device != "cpu" and store._feat_device is not None:  # the device tier is device memory
        assert store._feat_device.tensor.device.type == device
    store.close()


def test_device_gather_checks_ids(device):
    g = _graph()
    store = UnifiedStore.build(g, None, _budgets(g, 0.5, 0.2), device=device)
    read = store.gather if device != "cpu" else lambda i: gather_on_device(store, i)
    with pytest.raises(GraphError, match=r"node ID 80, outside the valid interval \[0, 80\)"):
        read(torch.tensor([0, 80], device=device))
    with pytest.raises(GraphError, match="1-D integer tensor"):
        read(torch.zeros(3, device=device))
    store.close()


@pytest.mark.parametrize("dev,host", [(1.0, 0.0), (0.5, 0.2)])
def test_checked_ids_skip_the_range_check_and_read_the_same(dev, host, device):
    """``gather(ids, checked=True)`` (a sampler's IDs): the same rows and counters, and one rank
    holding every row reads them without a single host sync (no range check)."""
    from torch.overrides import TorchFunctionMode

    syncs = []

    class Syncs(TorchFunctionMode):  # the calls that read a device value on the host
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in {"item", "tolist", "__int__", "__bool__", "__index__", "nonzero", "cpu"}:
                syncs.append(name)
            return func(*args, **(kwargs or {}))

    g = _graph()
    ids = torch.from_numpy(np.random.default_rng(3).integers(0, g.num_nodes, 300)).to(device)
    stores = [
        UnifiedStore.build(g, None, _budgets(g, dev, host), meter=TrafficMeter(), device=device)
        for _ in range(2)
    ]
    reads = []
    for checked, store in zip((False, True), stores, strict=True):
        read = (
            store.gather if device != "cpu" else lambda i, s=store, **k: gather_on_device(s, i, **k)
        )
        read(ids[:1], checked=checked)  # builds the device index
        syncs.clear()
        with Syncs():
            reads.append(read(ids, checked=checked))
        if dev == 1.0:
            assert syncs == ([] if checked else ["tolist"]), syncs
    assert torch.equal(reads[0], reads[1]) and torch.equal(
        reads[1].cpu(), torch.from_numpy(np.asarray(g.x))[ids.cpu()]
    )
    assert _stats(stores[0]) == _stats(stores[1])
    for store in stores:
        store.close()


def _one_rank_world(comm, one_sided, device):
    """A world of one rank (a ShardedTensor device tier): the read through rank_of equals the
    host path's rows and counters, one-sided and two-sided."""
    g = _graph()
    ids = torch.from_numpy(np.random.default_rng(2).integers(0, g.num_nodes, 200))
    ids[:5] = ids[0]
    b = _budgets(g, 1.0, 0.0)
    out = []
    for on_device in (False, True):
        store = UnifiedStore.build(
            g,
            comm,
            b,
            one_sided=one_sided,
            meter=TrafficMeter(),
            device=device,
            name=f"s{on_device}",
        )
        try:
            read = (lambda i, s=store: gather_on_device(s, i)) if on_device else store.gather
            rows = [read(ids.to(device)).cpu(), read(ids[:0].to(device)).cpu()]
            if on_device:
                assert store._device_index().all_local
            out.append((rows, _stats(store)))
        finally:
            store.close()
    (want, want_stats), (got, got_stats) = out
    assert all(torch.equal(w, t) for w, t in zip(want, got, strict=True))
    assert got_stats == want_stats
    return True


@pytest.mark.slow
@pytest.mark.parametrize("one_sided", [True, False])
def test_one_rank_world_reads_through_rank_of(one_sided, device):
    from fleetgnn.distributed.testing import run_world

    assert run_world(_one_rank_world, 1, one_sided, device, device=device) == [True]
