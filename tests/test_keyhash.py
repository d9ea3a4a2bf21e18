"""The keyed hash's primitives: tensor, numpy and Python-integer versions agree bit for bit."""

import numpy as np
import pytest
import torch

from fleetgnn.keyhash import (
    base_key,
    bounded_draws,
    bounded_draws_numpy,
    hash32,
    mix64,
    mix64_numpy,
    mix64_tensor,
    serial,
)

M64 = (1 << 64) - 1


def test_mix64_numpy_and_tensor_equal_the_python_reference():
    vals = [0, 1, 2**63 - 1, 2**63, M64, 0x123456789ABCDEF0, base_key(7, 1, 2, 3)]
    want = [mix64(v) for v in vals]
    assert mix64_numpy(np.array(vals, dtype=np.uint64)).tolist() == want
    signed = torch.tensor([v - (1 << 64) if v >= 1 << 63 else v for v in vals])
    assert [v & M64 for v in mix64_tensor(signed).tolist()] == want


def test_bounded_draws_equal_the_python_reference(device):
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 2**63, 64, dtype=np.int64) * np.where(np.arange(64) % 2, -1, 1)
    width = 5
    bounds = rng.integers(1, 2**31 + 1, (64, width), dtype=np.int64)
    bounds[:8] = 2**31  # the largest bound: the products stay below 2^63
    bounds[8:16] = 1  # a draw from [0, 1) is 0
    got = bounded_draws(torch.from_numpy(rows).to(device), torch.from_numpy(bounds).to(device))
    got_np = bounded_draws_numpy(rows.view(np.uint64), bounds)
    want = [
        [(hash32(int(r) & M64, i) * int(b[i])) >> 32 for i in range(width)]
        for r, b in zip(rows, bounds, strict=True)
    ]
    assert got.cpu().tolist() == want == got_np.tolist()
    assert (got_np >= 0).all() and (got_np < bounds).all() and not got_np[8:16].any()


def test_bounded_draws_are_uniform():
    rows = mix64_tensor(torch.arange(50_000))
    r = bounded_draws(rows, torch.full((50_000, 3), 7)).flatten()
    counts = torch.bincount(r, minlength=7).double()
    assert counts.numel() == 7
    assert ((counts - counts.mean()).abs() / counts.mean()).max() < 0.03


@pytest.mark.parametrize("rows", [0, 1 << 20])
def test_serial_runs_small_work_on_one_thread_and_restores(rows):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with serial(torch.device("cpu"), rows):
            inside = torch.get_num_threads()
        assert inside == (1 if rows == 0 else 2) and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
