"""The kernels: every row-gather implementation equals ``index_select`` bit for bit, and every
Fisher-Yates implementation the numpy sampler's offsets."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fleetgnn.kernels import KERNELS, _wide_dtype, fisher_yates, gather_rows, triton_available

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
    assert k.MEASURED[("fisher_yates", "cuda")][0] == "triton"
    assert KERNELS.chosen("fisher_yates", "cuda") == "triton"
    monkeypatch.setattr(k, "triton_available", lambda: False)
    assert KERNELS.chosen("fisher_yates", "cuda") == "torch"
    assert KERNELS.available("fisher_yates", "cuda") == ("torch",)
    assert KERNELS.names("fisher_yates", "cuda") == ("torch", "triton")
    for source in {src for _, src in k.MEASURED.values()}:  # each choice's committed figure
        assert (Path(__file__).resolve().parents[1] / source).is_file(), source


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


def _in_the_interpreter(code: str) -> None:
    """Run ``code`` with Triton's interpreter (kernels on the CPU); it prints ``ok`` at its end."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


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
    _in_the_interpreter(code)


def test_fisher_yates_defaults_and_torchs_kernel_equals_numpy():
    """The op's torch kernel gives numpy's offsets: distinct, in range, the same draws."""
    from fleetgnn.sampling.neighbor import _draws_numpy, _offsets_numpy

    assert KERNELS.names("fisher_yates", "cpu") == ("torch",)
    # on CUDA the measured Triton kernel (kernels.MEASURED), torch's where triton is missing
    cuda = "triton" if triton_available() else "torch"
    assert KERNELS.chosen("fisher_yates", "cuda") == cuda
    g = torch.Generator().manual_seed(0)
    for fanout in (1, 5, 15):
        deg = torch.randint(0, 3 * fanout, (50,), generator=g)
        seeds = torch.randint(0, 10**9, (50,), generator=g)
        got = fisher_yates(seeds, deg, fanout, 2**63 + 11)
        n = deg.clamp(min=fanout).numpy()
        want = _offsets_numpy(_draws_numpy(seeds.numpy(), n, fanout, 2**63 + 11), n)
        assert np.array_equal(got.numpy(), want)
        assert all(len(set(r)) == fanout for r in got.tolist())
        assert bool((got < torch.from_numpy(n)[:, None]).all())


def test_using_restores_the_previous_choice():
    KERNELS.use("gather_rows", "cpu", "wide")
    try:
        with KERNELS.using("gather_rows", "cpu", "index_select"):
            assert KERNELS.chosen("gather_rows", "cpu") == "index_select"
        assert KERNELS.chosen("gather_rows", "cpu") == "wide"
    finally:
        KERNELS.use("gather_rows", "cpu", None)
    with KERNELS.using("fisher_yates", "cpu", "torch"):
        assert KERNELS.chosen("fisher_yates", "cpu") == "torch"
    with pytest.raises(ValueError, match="choose one of torch"):
        with KERNELS.using("fisher_yates", "cpu", "triton"):
            pass
    assert KERNELS.chosen("fisher_yates", "cpu") == "torch"


@pytest.mark.slow
@pytest.mark.skipif(not triton_available(), reason="triton does not import here")
def test_the_triton_fisher_yates_equals_torchs_in_the_interpreter():
    """Every seed's partial shuffle by the Triton kernel equals the torch ops' and numpy's.

    Degrees below, at and above the fanout (take-all seeds draw from ``fanout`` slots), one near
    ``2^31``, 64-bit keys above ``2^63``, fanouts from 1 to past a power of two, seeds from one
    to more than a program's block.
    """
    code = (
        "import numpy as np, torch\n"
        "from fleetgnn.kernels import KERNELS\n"
        "from fleetgnn.sampling.neighbor import _draws_numpy, _offsets_numpy\n"
        "tri = KERNELS.impl('fisher_yates', 'triton')\n"
        "ref = KERNELS.impl('fisher_yates', 'torch')\n"
        "import itertools\n"
        "g = torch.Generator().manual_seed(0)\n"
        "cases = list(itertools.product((1, 2, 3, 5, 15, 16, 25, 33), (1, 7, 70, 130)))\n"
        "for fanout, num in cases[::3]:  # 3 is prime to 4 and 8: every fanout, every size\n"
        "    deg = torch.randint(0, 3 * fanout + 3, (num,), generator=g)\n"
        "    deg[: num // 3] = fanout + torch.randint(0, 3, (num // 3,), generator=g)\n"
        "    if num > 5:\n"
        "        deg[5] = 2**31 - 7\n"
        "    seeds = torch.randint(0, 10**12, (num,), generator=g)\n"
        "    key = int(torch.randint(0, 2**62, (1,), generator=g)) * 3 + 1\n"
        "    got = tri(seeds, deg, fanout, key)\n"
        "    assert torch.equal(got, ref(seeds, deg, fanout, key)), (fanout, num)\n"
        "    n = deg.clamp(min=fanout).numpy()\n"
        "    want = _offsets_numpy(_draws_numpy(seeds.numpy(), n, fanout, key), n)\n"
        "    assert np.array_equal(got.numpy(), want), (fanout, num)\n"
        "    assert tri(seeds, deg, fanout, key, block_seeds=16).equal(got)\n"
        "assert tri(seeds, deg, 200, 5, max_fanout=128).equal(ref(seeds, deg, 200, 5))\n"
        "print('ok')\n"
    )
    _in_the_interpreter(code)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["torch", "triton"])
def test_fisher_yates_kernels_equal_numpy_on_cuda(name):
    from fleetgnn.sampling.neighbor import _draws_numpy, _offsets_numpy

    if name == "triton" and not triton_available():
        pytest.skip("triton does not import here")
    fn = KERNELS.impl("fisher_yates", name)
    g = torch.Generator().manual_seed(1)
    for fanout in (1, 5, 10, 15, 25, 64, 200):
        deg = torch.randint(0, 4 * fanout, (5000,), generator=g)
        deg[0] = 2**31 - 3
        seeds = torch.randint(0, 10**12, (5000,), generator=g)
        got = fn(seeds.cuda(), deg.cuda(), fanout, 2**63 + 5)
        n = deg.clamp(min=fanout).numpy()
        want = _offsets_numpy(_draws_numpy(seeds.numpy(), n, fanout, 2**63 + 5), n)
        assert got.device.type == "cuda" and np.array_equal(got.cpu().numpy(), want), fanout


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


def test_keyed_dropout_defaults_to_torchs_kernel_and_keys_its_masks():
    """The op's torch kernel: the element kept iff its draw reaches p's threshold."""
    from fleetgnn.kernels import dropout_threshold, keyed_dropout
    from fleetgnn.ops.random import hash_uniform

    assert KERNELS.names("keyed_dropout", "cpu") == ("torch",)
    assert KERNELS.names("keyed_dropout", "cuda") == ("torch", "triton")
    assert KERNELS.chosen("keyed_dropout", "cuda") == "torch"  # until a GPU check times it
    x = torch.randn(33, 7, generator=torch.Generator().manual_seed(0))
    ids = torch.arange(100, 133)
    from fleetgnn.keyhash import base_key

    base = base_key(0x6E6F6465, 5, 2, 1)  # the node salt, seed 5, step 2, layer 1
    out, keep = keyed_dropout(x, ids, base, 0.3, True)
    u = hash_uniform(5, 2, 1, ids, 7)
    assert torch.equal(keep.bool(), u >= torch.tensor(0.3, dtype=torch.float32))
    assert torch.equal(out, x * (1 / 0.7) * keep)
    assert dropout_threshold(0.3) == int(np.ceil(np.float32(0.3) * 2**24))


@pytest.mark.slow
@pytest.mark.skipif(not triton_available(), reason="triton does not import here")
def test_the_triton_keyed_dropout_equals_torchs_in_the_interpreter():
    """Masks and outputs bit-identical to torch's kernel: row keys mixed in the kernel or given,
    widths below, at and past a column block, float32, bfloat16 and float16, p near 0 and 1."""
    code = (
        "import torch\n"
        "from fleetgnn.kernels import KERNELS\n"
        "tri = KERNELS.impl('keyed_dropout', 'triton')\n"
        "ref = KERNELS.impl('keyed_dropout', 'torch')\n"
        "import itertools\n"
        "g = torch.Generator().manual_seed(0)\n"
        "cases = list(itertools.product((1, 7, 128, 200), (torch.float32, torch.bfloat16,\n"
        "    torch.float16), (1e-6, 0.1, 0.5, 0.999), (None, 2**63 + 12345, 7), (True, False)))\n"
        "# every 5th of the 288 (5 is prime to each factor's count): each value of each factor\n"
        "# meets the others' values, in a fifth of the interpreter's time\n"
        "for width, dtype, p, base, save in cases[::5]:\n"
        "    x = torch.randn(45, width, generator=g).to(dtype)\n"
        "    ids = torch.randint(-2**62, 2**62, (45,), generator=g)\n"
        "    o1, k1 = tri(x, ids, base, p, save, block_values=256)\n"
        "    o2, k2 = ref(x, ids, base, p, save)\n"
        "    assert torch.equal(o1, o2), (width, dtype, p, base)\n"
        "    assert (k1 is None) == (not save)\n"
        "    assert not save or torch.equal(k1, k2), (width, dtype, p, base)\n"
        "x = torch.randn(9, 4, dtype=torch.float64)\n"
        "ids = torch.arange(9)\n"
        "assert torch.equal(tri(x, ids, 3, 0.5, True)[0], ref(x, ids, 3, 0.5, True)[0])\n"
        "print('ok')\n"
    )
    _in_the_interpreter(code)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_keyed_dropout_kernels_equal_the_cpus_on_cuda(dtype):
    """Every CUDA implementation gives the CPU's masks and outputs (so every engine's dropout is
    the same on every device), bit for bit."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3000, 96, generator=g).to(dtype)
    ids = torch.randint(0, 2**40, (3000,), generator=g)
    want, want_keep = KERNELS.impl("keyed_dropout", "torch")(x, ids, 2**63 + 9, 0.35, True)
    for name in KERNELS.available("keyed_dropout", "cuda"):
        fn = KERNELS.impl("keyed_dropout", name)
        out, keep = fn(x.cuda(), ids.cuda(), 2**63 + 9, 0.35, True)
        assert torch.equal(keep.cpu(), want_keep), name
        assert torch.equal(out.cpu(), want), name


def _random_csr(g, rows, cols, max_deg):
    deg = torch.randint(0, max_deg + 1, (rows,), generator=g)
    indptr = torch.zeros(rows + 1, dtype=torch.int64)
    torch.cumsum(deg, 0, out=indptr[1:])
    indices = torch.randint(0, cols, (int(indptr[-1]),), generator=g)  # repeats allowed
    return indptr, indices


def test_csr_mm_defaults_to_torchs_product_and_sums_repeats():
    from fleetgnn.kernels import csr_mm

    assert KERNELS.names("csr_mm", "cuda") == ("torch", "triton")
    assert KERNELS.chosen("csr_mm", "cuda") == "torch"  # until a GPU check times both
    g = torch.Generator().manual_seed(2)
    indptr, indices = _random_csr(g, 9, 4, 12)  # more edges than entries: repeats summed
    w = torch.rand(indices.numel(), generator=g, dtype=torch.float64)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    dense = torch.zeros(9, 4, dtype=torch.float64)
    rows = torch.repeat_interleave(torch.arange(9), indptr[1:] - indptr[:-1])
    dense.index_put_((rows, indices), w, accumulate=True)
    torch.testing.assert_close(csr_mm(indptr, indices, w, x, 9), dense @ x)
    ones = torch.zeros(9, 4, dtype=torch.float64).index_put_(
        (rows, indices), torch.ones_like(w), accumulate=True
    )
    torch.testing.assert_close(csr_mm(indptr, indices, None, x, 9), ones @ x)


@pytest.mark.slow
@pytest.mark.skipif(not triton_available(), reason="triton does not import here")
def test_the_triton_csr_product_equals_torchs_in_the_interpreter():
    """Within rounding of torch's product: weights or none, empty rows, repeated entries, rows
    longer than an edge block, widths below, at and past a column block, float64 exactly."""
    code = (
        "import torch\n"
        "from tests.test_kernels import _random_csr\n"
        "from fleetgnn.kernels import KERNELS\n"
        "tri = KERNELS.impl('csr_mm', 'triton')\n"
        "ref = KERNELS.impl('csr_mm', 'torch')\n"
        "g = torch.Generator().manual_seed(0)\n"
        "for width in (1, 7, 128, 200):\n"
        "    for dtype in (torch.float32, torch.float64):\n"
        "        indptr, indices = _random_csr(g, 23, 17, 40)\n"
        "        x = torch.randn(17, width, generator=g).to(dtype)\n"
        "        w = torch.rand(indices.numel(), generator=g).to(dtype)\n"
        "        for vals in (w, None):\n"
        "            got = tri(indptr, indices, vals, x, 23, block_edges=8)\n"
        "            want = ref(indptr, indices, vals, x, 23)\n"
        "            tol = 1e-12 if dtype == torch.float64 else 1e-5\n"
        "            torch.testing.assert_close(got, want, rtol=tol, atol=tol)\n"
        "x = torch.randn(5, 3)\n"
        "empty = torch.zeros(0, dtype=torch.int64)\n"
        "none = tri(torch.zeros(4, dtype=torch.int64), empty, None, x, 3)\n"
        "assert torch.equal(none, torch.zeros(3, 3))\n"
        "print('ok')\n"
    )
    _in_the_interpreter(code)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_csr_mm_kernels_agree_on_cuda():
    """Every CUDA implementation of the block product equals the CPU's within rounding."""
    g = torch.Generator().manual_seed(3)
    indptr, indices = _random_csr(g, 4000, 9000, 25)
    x = torch.randn(9000, 128, generator=g)
    w = torch.rand(indices.numel(), generator=g)
    want = KERNELS.impl("csr_mm", "torch")(indptr, indices, w, x, 4000)
    for name in KERNELS.available("csr_mm", "cuda"):
        fn = KERNELS.impl("csr_mm", name)
        got = fn(indptr.cuda(), indices.cuda(), w.cuda(), x.cuda(), 4000)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4, msg=name)
