"""Transfers: host <-> device copies issued now and used later, on every device."""

import pytest
import torch

from fleetgnn.distributed.transfer import Transfers, TransferTimes


@pytest.mark.parametrize("overlap", [True, False])
def test_loads_and_saves_copy_exactly(device, overlap):
    x = Transfers(device, overlap)
    src = torch.arange(60, dtype=torch.float64).view(20, 3)
    idx = torch.tensor([4, 0, 19, 4])
    a = x.load(src, idx, key=("fill", 0))
    b = x.load(src[5:9])
    assert x.inflight_bytes == (4 + 4) * 3 * 8
    assert torch.equal(a.wait().cpu(), src[idx]) and a.wait().device.type == device
    assert torch.equal(b.wait().cpu(), src[5:9])
    assert x.inflight_bytes == 0
    dst = x.host_zeros(6, 3, dtype=torch.float64)
    assert dst.is_pinned() == (overlap and device == "cuda")
    dev = torch.randn(2, 3, dtype=torch.float64, device=device)
    s1 = x.save(dev, dst[1:3], key="out")
    s2 = x.save(dev * 2, key="back")
    x.drain()
    assert torch.equal(dst[1:3], dev.cpu()) and not dst[0].any() and not dst[3:].any()
    assert torch.equal(s2.wait(), dev.cpu() * 2) and s1.wait() is not None
    t = x.times
    assert (t.loads, t.saves, t.h2d_bytes, t.d2h_bytes) == (2, 2, 8 * 3 * 8, 4 * 3 * 8)
    assert t.transfer_s > 0 and 0.0 <= t.hidden_fraction <= 1.0


def test_an_overlapped_save_lands_late_on_the_cpu():
    """The CPU emulation copies a save at its wait, the latest an async copy could land."""
    x = Transfers("cpu", True)
    dev = torch.ones(3)
    dst = torch.zeros(3)
    p = x.save(dev, dst)
    assert not dst.any()  # not yet
    dev.add_(1)  # a caller that changed its source before the wait: visible in the result
    p.wait()
    assert torch.equal(dst, torch.full((3,), 2.0))
    blocking = Transfers("cpu", False)
    dst2 = torch.zeros(3)
    blocking.save(dev, dst2)
    assert torch.equal(dst2, dev)  # at issue


def test_an_overlapped_load_copies_at_issue():
    src = torch.ones(4, 2)
    p = Transfers("cpu", True).load(src[1:3])
    src.zero_()
    assert torch.equal(p.wait(), torch.ones(2, 2))
    # the blocking path on the CPU hands out the view, as the engines did before
    view = Transfers("cpu", False).load(src[1:3]).wait()
    assert view.data_ptr() == src[1:3].data_ptr()


def test_hidden_fraction_is_one_minus_wait_over_transfer():
    t = TransferTimes(transfer_s=2.0, wait_s=0.5)
    assert t.hidden_fraction == 0.75 and t.to_dict()["hidden_fraction"] == 0.75
    assert TransferTimes().hidden_fraction == 0.0
    assert TransferTimes(transfer_s=1.0, wait_s=3.0).hidden_fraction == 0.0
    t.reset()
    assert t == TransferTimes()
