"""The row-gather kernels: every implementation equals ``index_select`` bit for bit."""

import os
import subprocess
import sys

import pytest
import torch

from fleetgnn.kernels import KERNELS, _wide_dtype, gather_rows, triton_available

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8]


def _table(dtype, rows, width):
    g = torch.Generator().manual_seed(rows * 31 + width)
    if dtype.is_floating_point:
        t = torch.randn(rows, width, generator=g).to(dtype)
        t[0, 0] = float("nan")  # bits move, nothing is computed: a NaN survives as itself
        return t
    return torch.randint(0, 100, (rows, width), generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1, 3, 4, 100, 128])
@pytest.mark.parametrize("name", ["index_select", "wide"])
def test_implementations_equal_index_select(name, width, dtype):
    t = _table(dtype, 50, width)
    ids = torch.tensor([0, 49, 7, 7, 3, 0, 12], dtype=torch.int64)
    want = t.index_select(0, ids)
    fn = KERNELS.impl("gather_rows", name)
    got = fn(t, ids, None)
    assert got.dtype == dtype and torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    out = torch.empty_like(want)
    assert fn(t, ids, out) is out and torch.equal(out.view(torch.uint8), want.view(torch.uint8))
    empty = fn(t, torch.empty(0, dtype=torch.int64), None)
    assert empty.shape == (0, width)
    via = torch.randperm(50, generator=torch.Generator().manual_seed(width)).int()
    got = fn(t, ids, None, via=via)  # rows through a lookup: t[via[ids]]
    assert torch.equal(got.view(torch.uint8), t[via[ids].long()].view(torch.uint8))


def test_the_wide_view_is_the_widest_element_dividing_the_row():
    assert _wide_dtype(torch.zeros(4, 100)) == torch.complex128  # 400 bytes: 25 x 16
    assert _wide_dtype(torch.zeros(4, 2)) == torch.int64  # 8 bytes
    assert _wide_dtype(torch.zeros(4, 3)) is None  # 12 bytes: nothing wider than 4 divides
    assert _wide_dtype(torch.zeros(4, 6, dtype=torch.bfloat16)) == torch.int32  # 12 bytes
    assert _wide_dtype(torch.zeros(8, 100)[:, :50]) is None  # not contiguous
    # a view starting mid-row is aligned only to its element: the widest that divides it
    t = torch.zeros(10, 4)[1:]  # starts 16 bytes in
    assert t.data_ptr() % 16 == 0 and _wide_dtype(t) == torch.complex128
    got = KERNELS.impl("gather_rows", "wide")(t, torch.tensor([8, 0]), None)
    assert torch.equal(got, t[[8, 0]])


def test_defaults_are_torchs_kernel_and_use_checks_names():
    assert KERNELS.names("gather_rows", "cpu") == ("index_select", "wide")
    assert KERNELS.names("gather_rows", "cuda") == ("index_select", "wide", "triton")
    assert KERNELS.chosen("gather_rows", "cpu") == "index_select"
    # on CUDA the measured Triton kernel (kernels.MEASURED), torch's where triton is missing
    cuda = "triton" if triton_available() else "index_select"
    assert KERNELS.chosen("gather_rows", "cuda") == cuda
    with pytest.raises(ValueError, match="choose one of index_select, wide"):
        KERNELS.use("gather_rows", "cpu", "triton")
    KERNELS.use("gather_rows", "cpu", "wide")
    try:
        t = _table(torch.float32, 20, 8)
        assert KERNELS.chosen("gather_rows", "cpu") == "wide"
        assert torch.equal(gather_rows(t, torch.tensor([3, 1])), t[[3, 1]])
    finally:
        KERNELS.use("gather_rows", "cpu", None)
    assert KERNELS.chosen("gather_rows", "cpu") == "index_select"


def test_a_measured_triton_choice_falls_back_without_triton(monkeypatch):
    import fleetgnn.kernels as k

    assert k.MEASURED[("gather_rows", "cuda")][0] == "triton"
    monkeypatch.setattr(k, "triton_available", lambda: False)
    assert KERNELS.chosen("gather_rows", "cuda") == "index_select"
    monkeypatch.setattr(k, "triton_available", lambda: True)
    assert KERNELS.chosen("gather_rows", "cuda") == "triton"
    assert KERNELS.chosen("gather_rows", "cpu") == "index_select"


@pytest.mark.slow
def test_the_environment_chooses_and_a_bad_entry_warns_in_one_line():
    code = (
        "import warnings; warnings.simplefilter('error');"
        "from fleetgnn.kernels import KERNELS; print(KERNELS.chosen('gather_rows', 'cpu'))"
    )
    env = {**os.environ, "FLEETGNN_KERNELS": "gather_rows:cpu=wide"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "wide", out.stderr
    code = "from fleetgnn.kernels import KERNELS; print(KERNELS.chosen('gather_rows', 'cpu'))"
    for bad, says in (("gather_rows=wide", "op:device=name"), ("spmm:cpu=x", "unknown op")):
        env = {**os.environ, "FLEETGNN_KERNELS": bad}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "index_select"
        assert says in out.stderr and "ignored" in out.stderr


@pytest.mark.slow
@pytest.mark.skipif(not triton_available(), reason="triton does not import here")
def test_the_triton_kernel_equals_index_select_in_the_interpreter():
    """Triton's interpreter runs the kernel on the CPU (the GPU check times it on CUDA)."""
    code = (
        "import torch\n"
        "from fleetgnn.kernels import KERNELS\n"
        "from fleetgnn.kernels import TRITON_SWEEP\n"
        "fn = KERNELS.impl('gather_rows', 'triton')\n"
        "g = torch.Generator().manual_seed(0)\n"
        "for width in (1, 5, 100, 300):\n"
        "    t = torch.randn(64, width, generator=g)\n"
        "    ids = torch.randint(0, 64, (37,), generator=g)\n"
        "    assert torch.equal(fn(t, ids, None), t[ids]), width\n"
        "    out = torch.empty(37, width)\n"
        "    assert fn(t, ids, out) is out and torch.equal(out, t[ids])\n"
        "    for cfg in TRITON_SWEEP:  # every launch shape the GPU check times\n"
        "        assert torch.equal(fn(t, ids, None, **cfg), t[ids]), (width, cfg)\n"
        "    via = torch.randperm(64, generator=g).int()  # table[via[ids]], in one pass\n"
        "    assert torch.equal(fn(t, ids, None, via=via), t[via[ids].long()]), width\n"
        "    wide = torch.zeros(37, width + 3)  # rows of an output wider than the table's\n"
        "    fn(t, ids, wide[:, :width])\n"
        "    assert torch.equal(wide[:, :width], t[ids]) and not wide[:, width:].any()\n"
        "print('ok')\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["index_select", "wide", "triton"])
def test_implementations_equal_on_cuda(name):
    if name == "triton" and not triton_available():
        pytest.skip("triton does not import here")
    t = _table(torch.float32, 1000, 100).cuda()
    ids = torch.randint(0, 1000, (777,), device="cuda")
    fn = KERNELS.impl("gather_rows", name)
    assert torch.equal(fn(t, ids, None).view(torch.int32), t[ids].view(torch.int32))
    via = torch.randperm(1000, device="cuda").int()
    got = fn(t, ids, None, via=via)
    assert torch.equal(got.view(torch.int32), t[via[ids].long()].view(torch.int32))
