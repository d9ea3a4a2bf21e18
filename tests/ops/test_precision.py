"""The graph ops under bf16 autocast: inputs widened, reductions in float32, gradients flow back."""

import pytest
import torch

from fleetgnn.ops import Adjacency, edge_softmax, gsddmm, gspmm, keyed_dropout
from fleetgnn.ops.spmm import ScaledSpMM


def _adj(device):
    src = torch.tensor([0, 1, 2, 3, 3, 4, 0, 2])
    dst = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    return Adjacency.from_edges(src.to(device), dst.to(device), num_dst=4, num_src=5)


def _amp(device):
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_gspmm_reduces_bf16_rows_in_float32(reduce, device):
    adj = _adj(device)
    x = torch.randn(5, 3, device=device).to(torch.bfloat16).requires_grad_()
    w = torch.rand(8, device=device)
    with _amp(device):
        out = gspmm(adj, x, reduce, w)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, gspmm(adj, x.detach().float(), reduce, w))
    out.sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.bfloat16


def test_sddmm_softmax_and_scaled_spmm_widen(device):
    adj = _adj(device)
    a = torch.randn(5, 2, 4, device=device).to(torch.bfloat16).requires_grad_()
    b = torch.randn(4, 2, 4, device=device)
    with _amp(device):
        scores = gsddmm(adj, a, b, "dot")
        alpha = edge_softmax(adj, scores.to(torch.bfloat16))
        op = ScaledSpMM(adj, torch.rand(4, device=device), torch.rand(5, device=device))
        y = op(a[:, 0])
    assert scores.dtype == alpha.dtype == y.dtype == torch.float32
    torch.testing.assert_close(scores, gsddmm(adj, a.detach().float(), b, "dot"))
    (alpha.sum() + y.sum()).backward()
    assert a.grad is not None and a.grad.dtype == torch.bfloat16


def test_keyed_dropout_keeps_bf16_and_the_float32_mask(device):
    x = torch.randn(6, 5, device=device)
    ids = torch.arange(6, device=device)
    full = keyed_dropout(x, 0.5, seed=1, step=2, layer=0, ids=ids)
    half = keyed_dropout(x.to(torch.bfloat16), 0.5, seed=1, step=2, layer=0, ids=ids)
    assert half.dtype == torch.bfloat16
    assert torch.equal(half != 0, full != 0)  # the same keyed mask
