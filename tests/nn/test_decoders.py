import torch

from fleetgnn.nn.decoders import DistMultDecoder, DotDecoder, HadamardMLPDecoder, build_decoder


def test_decoders_score_each_pair():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    assert torch.allclose(DotDecoder()(a, b), torch.einsum("pd,pd->p", a, b))
    dm = DistMultDecoder(8)
    with torch.no_grad():
        dm.rel.copy_(torch.arange(8.0))
    assert torch.allclose(dm(a, b), (a * torch.arange(8.0) * b).sum(1))
    mlp = HadamardMLPDecoder(8, 4)
    assert torch.allclose(mlp(a, b), mlp.mlp(a * b).squeeze(-1)) and mlp(a, b).shape == (5,)
    assert isinstance(build_decoder("mlp", 8), HadamardMLPDecoder)
