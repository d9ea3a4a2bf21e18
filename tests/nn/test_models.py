import pytest
import torch
from nn_graphs import full_block, random_graph

from fleetgnn.errors import ConfigError
from fleetgnn.nn import GNN, MODEL_DEFAULTS, GATConv, LocalAggregator, build_model


def two_hop_blocks(graph, dsts, seed=0, device="cpu"):
    b1 = full_block(graph, dsts, seed=seed)
    b0 = full_block(graph, b1.src_ids.tolist(), seed=seed + 1)
    return [LocalAggregator(b.to(device), dtype=torch.float64) for b in (b0, b1)]


@pytest.mark.parametrize("conv", ["gcn", "sage", "gat", "gin"])
def test_blocks_equal_full_graph_in_training_mode(conv, device):
    graph = random_graph(n=16, p=0.2, seed=3)
    full = LocalAggregator.from_graph(graph, dtype=torch.float64, device=device)
    torch.manual_seed(0)
    model = (
        build_model(
            conv, 6, 3, hidden_dim=4, dropout=0.4, attn_dropout=0.3, norm="layer", residual=True
        )
        .double()
        .train()
        .to(device)
    )
    x = torch.randn(16, 6, dtype=torch.float64, device=device)
    dsts = [5, 0, 11]
    ref = model([full, full], x, step=7)[dsts]
    for seed in (0, 5):  # different row orders inside the blocks
        aggs = two_hop_blocks(graph, dsts, seed=seed, device=device)
        src = aggs[0].src_ids.to(device)
        torch.testing.assert_close(model(aggs, x[src], step=7), ref, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(model([full, full], x, step=8)[dsts], ref)  # dropout is active
    model.eval()
    torch.testing.assert_close(model([full, full], x, step=1), model([full, full], x, step=2))


def test_forward_is_the_chain_of_layer_forward(graph, full_agg):
    model = GNN(5, 4, 2, num_layers=3, conv="sage", dropout=0.5).double()
    x = torch.randn(graph.num_nodes, 5, dtype=torch.float64)
    h = x
    for i in range(3):
        h = model.layer_forward(i, full_agg, h, step=2)
    torch.testing.assert_close(model([full_agg] * 3, x, step=2), h)


def test_dropout_keys_follow_global_ids(graph, full_agg):
    """Input dropout on layer 0 depends on (seed, step, layer, global ID, feature) only."""
    kw = {"num_layers": 1, "conv": "sage", "dropout": 0.5, "conv_kwargs": {"aggr": "sum"}}
    model = GNN(5, 4, 2, seed=3, **kw)
    model = model.double()
    x = torch.randn(graph.num_nodes, 5, dtype=torch.float64)
    dsts = [2, 7]
    ref = model([full_agg], x, step=1)[dsts]
    block = full_block(graph, dsts, seed=9)
    agg = LocalAggregator(block, dtype=torch.float64)
    torch.testing.assert_close(model([agg], x[block.src_ids], step=1), ref)
    other = GNN(5, 4, 2, seed=4, **kw)
    other.load_state_dict(model.state_dict())
    assert not torch.allclose(other.double()([full_agg], x, step=1)[dsts], ref)


def test_gat_defaults_match_the_paper_configuration():
    model = build_model("gat", 1433, 7)
    hidden, out = model.convs
    assert isinstance(hidden, GATConv) and hidden.heads == 8 and hidden.out_channels == 8
    assert hidden.concat and hidden.attn_dropout == 0.6
    assert out.heads == 1 and not out.concat and out.in_channels == 64 and out.out_channels == 7
    assert isinstance(model.act, torch.nn.ELU) and model.dropout == 0.6
    assert build_model("gcn", 10, 3).convs[0].out_channels == MODEL_DEFAULTS["gcn"]["hidden_dim"]


def test_gradients_reach_every_parameter(graph, full_agg):
    for conv in ("gcn", "sage", "gat", "gin"):
        model = build_model(conv, 5, 3, norm="layer", residual=True, hidden_dim=6).double()
        x = torch.randn(graph.num_nodes, 5, dtype=torch.float64)
        model([full_agg, full_agg], x).sum().backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None]
        assert not missing, (conv, missing)


def test_config_errors(graph, full_agg):
    with pytest.raises(ConfigError, match="unknown model"):
        build_model("gcnn", 3, 2)
    with pytest.raises(ConfigError, match="unknown model option"):
        build_model("gcn", 3, 2, hiden_dim=4)
    with pytest.raises(ConfigError, match="batch norm"):
        GNN(3, 4, 2, norm="batch")
    with pytest.raises(ConfigError, match="one aggregator per layer"):
        GNN(3, 4, 2, num_layers=2)([full_agg], torch.randn(graph.num_nodes, 3))
    with pytest.raises(ConfigError, match="num_layers"):
        GNN(3, 4, 2, num_layers=0)
