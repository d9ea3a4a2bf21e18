"""Typed layers against dense closed forms in float64, and the typed model on sampled blocks."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fleetgnn.errors import ConfigError
from fleetgnn.graph.hetero import HeteroSchema, from_typed_edges
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.nn import SAGEConv
from fleetgnn.nn.hetero import (
    HeteroConv,
    HeteroGNN,
    RGATConv,
    RGCNConv,
    TypedAggregator,
    build_hetero_model,
)
from fleetgnn.sampling.hetero import HeteroNeighborSampler, full_hetero_block

D = torch.float64
REL = (("a", "r1", "a"), ("b", "r2", "a"), ("a", "r3", "b"))
EDGES = {  # (src, dst) type-local; a2 gets nothing from r2, b1 nothing from r3
    REL[0]: ([1, 2, 0, 2], [0, 0, 1, 1]),
    REL[1]: ([0, 1, 1], [0, 0, 1]),
    REL[2]: ([0, 2], [0, 0]),
}


@pytest.fixture()
def tiny():
    schema = HeteroSchema(("a", "b"), (3, 2), REL, target="a")
    g = from_typed_edges(schema, EDGES, y=np.array([0, 1, 0]), train_mask=np.ones(3, bool))
    torch.manual_seed(0)
    h = {"a": torch.randn(3, 4, dtype=D), "b": torch.randn(2, 4, dtype=D)}
    return g, TypedAggregator(full_hetero_block(g), dtype=D), h


def _adj(rel):
    n = {"a": 3, "b": 2}
    a = torch.zeros(n[rel[2]], n[rel[0]], dtype=D)
    for s, d in zip(*EDGES[rel], strict=True):
        a[d, s] += 1
    return a


def _mean(a):
    deg = a.sum(1, keepdim=True)
    return torch.where(deg > 0, a / deg.clamp_min(1), 0.0)


@pytest.mark.parametrize("num_bases", [None, 2])
def test_rgcn_equals_dense_formula(tiny, num_bases):
    _, agg, h = tiny
    conv = RGCNConv(4, 3, REL, num_bases=num_bases).double()
    with torch.no_grad():
        conv.bias.copy_(torch.randn(3, dtype=D))
    out = conv(agg, h)
    w = conv.relation_weights()
    for t in ("a", "b"):
        want = h[t] @ conv.root.weight.T + conv.bias
        for r, rel in enumerate(REL):
            if rel[2] == t:
                want = want + _mean(_adj(rel)) @ h[rel[0]] @ w[r]
        torch.testing.assert_close(out[t], want, rtol=1e-12, atol=1e-12)


def test_basis_with_one_basis_per_relation_equals_free_weights(tiny):
    _, agg, h = tiny
    basis = RGCNConv(4, 3, REL, num_bases=3).double()
    free = RGCNConv(4, 3, REL).double()
    with torch.no_grad():
        basis.comp.copy_(torch.eye(3, dtype=D))
        free.weight.copy_(basis.bases)
        free.root.weight.copy_(basis.root.weight)
    a, b = basis(agg, h), free(agg, h)
    for t in a:
        torch.testing.assert_close(a[t], b[t], rtol=1e-12, atol=1e-12)
    # and a general combination is the weighted sum of the bases
    with torch.no_grad():
        basis.comp.copy_(torch.randn(3, 3, dtype=D))
    w = basis.relation_weights()
    torch.testing.assert_close(w[1], sum(basis.comp[1, k] * basis.bases[k] for k in range(3)))


@pytest.mark.parametrize("order", ["project", "aggregate"])
@pytest.mark.parametrize("concat", [True, False])
def test_rgat_equals_dense_formula(tiny, concat, order):
    """Both orders of a relation's work (project the sources, or aggregate them first)."""
    _, agg, h = tiny
    heads, width = 2, 3
    conv = RGATConv(4, width, REL, heads=heads, concat=concat).double()
    conv.order = order
    with torch.no_grad():
        conv.bias.copy_(torch.randn_like(conv.bias))
        conv.att_src.mul_(10)  # away from uniform attention
    out = conv(agg, h)
    n = {"a": 3, "b": 2}
    want = {}
    for r, rel in enumerate(REL):
        s, _, d = rel
        gs = (h[s] @ conv.lin[r]).view(-1, heads, width)
        gd = (h[d] @ conv.lin[r]).view(-1, heads, width)
        res = torch.zeros(n[d], heads, width, dtype=D)
        for i in range(n[d]):
            nbrs = [u for u, v in zip(*EDGES[rel], strict=True) if v == i]
            if not nbrs:
                continue
            sc = torch.stack(
                [
                    F.leaky_relu(
                        (gs[u] * conv.att_src[r]).sum(-1) + (gd[i] * conv.att_dst[r]).sum(-1), 0.2
                    )
                    for u in nbrs
                ]
            )  # [k, H]
            alpha = torch.softmax(sc, 0)
            res[i] = sum(alpha[k][:, None] * gs[u] for k, u in enumerate(nbrs))
        res = res.reshape(n[d], -1) if concat else res.mean(1)
        res = res + conv.bias[r]
        want[d] = want[d] + res if d in want else res
    assert set(out) == set(want)
    for t in want:
        torch.testing.assert_close(out[t], want[t], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("order", ["project", "aggregate"])
def test_rgat_gradients_of_inputs_and_parameters_pass_gradcheck(tiny, order):
    """The backward passes (destination scores through the folded weight included) match
    finite differences of the forward, for every input row and every parameter."""
    _, agg, h = tiny
    conv = RGATConv(4, 3, REL, heads=2).double()
    conv.order = order
    names = ("lin", "att_src", "att_dst", "bias")
    with torch.no_grad():
        conv.bias.copy_(torch.randn_like(conv.bias))
        conv.att_src.mul_(10)  # scores of both signs: the destination term matters
        conv.att_dst.mul_(10)
    args = [h["a"], h["b"], *(getattr(conv, n).detach() for n in names)]
    args = [a.clone().requires_grad_() for a in args]

    def run(xa, xb, *params):
        out = torch.func.functional_call(
            conv, dict(zip(names, params, strict=True)), (agg, {"a": xa, "b": xb})
        )
        return tuple(out[t] for t in sorted(out))

    assert torch.autograd.gradcheck(run, args)


@pytest.mark.parametrize("order", ["project", "aggregate"])
def test_rgat_on_the_device_equals_the_cpu(tiny, device, order):
    """Forward and every gradient of both orders on the device (CUDA: its sparse kernels)."""
    g, agg, h = tiny
    conv = RGATConv(4, 3, REL, heads=2).double()
    conv.order = order
    with torch.no_grad():
        conv.att_src.mul_(10)
    dev_conv = RGATConv(4, 3, REL, heads=2).double().to(device)
    dev_conv.load_state_dict(conv.state_dict())
    dev_conv.order = order
    dev_agg = TypedAggregator(full_hetero_block(g).to(device), dtype=D)
    outs = []
    for c, a, rows in (
        (conv, agg, h),
        (dev_conv, dev_agg, {t: v.to(device) for t, v in h.items()}),
    ):
        rows = {t: v.clone().requires_grad_() for t, v in rows.items()}
        out = c(a, rows)
        sum((v * (i + 1)).sum() for i, (_, v) in enumerate(sorted(out.items()))).backward()
        grads = [rows[t].grad.cpu() for t in sorted(rows)] + [p.grad.cpu() for p in c.parameters()]
        outs.append(([out[t].detach().cpu() for t in sorted(out)], grads))
    for want, got in zip(outs[0], outs[1], strict=True):
        for a, b in zip(want, got, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("order", ["project", "aggregate"])
@pytest.mark.parametrize("rows", [torch.float32, torch.bfloat16])
def test_rgat_trains_under_bfloat16_autocast(tiny, order, rows):
    """Mixed precision: the products in bfloat16, the graph ops in float32, every gradient in
    its input's dtype; close to the float32 layer (rows given in float32 or bfloat16)."""
    _, agg, h = tiny
    conv = RGATConv(4, 3, REL, heads=2)
    conv.order = order
    runs = []
    for amp in (False, True):
        x = {t: v.float().to(rows if amp else torch.float32).requires_grad_() for t, v in h.items()}
        conv.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            out = conv(agg, x)
        sum(v.float().sum() for v in out.values()).backward()
        assert all(v.grad.dtype == v.dtype for v in x.values())
        runs.append(([out[t].float() for t in sorted(out)], conv.lin.grad.clone()))
    for a, b in zip(runs[0][0], runs[1][0], strict=True):
        torch.testing.assert_close(b, a, rtol=0.05, atol=0.05)
    torch.testing.assert_close(runs[1][1], runs[0][1], rtol=0.05, atol=0.05)


def test_rgat_orders_agree_with_attention_dropout_and_edge_ids_match(tiny):
    """Both orders draw the same keyed attention masks: the bipartite hop's edge IDs are the
    relation aggregator's, edge for edge."""
    _, agg, h = tiny
    for rel in REL:
        for a, b in zip(agg.edge_ids(rel), agg.relation(rel).edge_ids(), strict=True):
            assert torch.equal(a, b)
    conv = RGATConv(4, 3, REL, heads=2, attn_dropout=0.5, seed=7).double().train()
    outs = {}
    for order in ("project", "aggregate"):
        conv.order = order
        outs[order] = conv(agg, h, step=3, layer=1)
    for t in outs["project"]:
        torch.testing.assert_close(outs["project"][t], outs["aggregate"][t], rtol=1e-12, atol=1e-12)
    conv.order = "auto"
    assert not torch.equal(conv(agg, h, step=4, layer=1)["a"], outs["project"]["a"])


def test_rgat_order_rule_follows_the_work():
    """Aggregating first where a relation has far fewer destinations than sources, projecting
    first where it has fewer sources; the rows' gradient counts on the projecting side."""
    from fleetgnn.ops.adjacency import Structure

    conv = RGATConv(256, 64, REL, heads=4)

    def hop(m, s, e):
        indptr = torch.linspace(0, e, m + 1).long()
        return Structure(indptr, torch.randint(0, s, (e,)), m, s)

    x = torch.zeros(1)
    assert conv.aggregates_first(hop(1000, 20000, 5000), x)  # authors into few papers
    assert not conv.aggregates_first(hop(20000, 1000, 5000), x)  # institutes into many authors
    # near-equal sides: the sparse work of aggregating F-wide rows decides for projecting
    assert not conv.aggregates_first(hop(10000, 10000, 40000), x)
    # a hop whose rows need a gradient pays a third dense pass when projecting
    wide = hop(6000, 10000, 12000)
    assert not conv.aggregates_first(wide, x)
    assert conv.aggregates_first(wide, torch.zeros(1, requires_grad=True))
    conv.order = "project"
    assert not conv.aggregates_first(hop(1000, 20000, 5000), x)


@pytest.mark.parametrize("aggr", ["sum", "mean"])
def test_hetero_conv_of_sage_equals_dense_formula(tiny, aggr):
    _, agg, h = tiny
    convs = {rel: SAGEConv(4, 3).double() for rel in REL}
    out = HeteroConv(convs, aggr=aggr)(agg, h)
    for t in ("a", "b"):
        parts = [
            convs[rel].lin_l(_mean(_adj(rel)) @ h[rel[0]]) + convs[rel].lin_r(h[t])
            for rel in REL
            if rel[2] == t
        ]
        want = sum(parts) / (len(parts) if aggr == "mean" else 1)
        torch.testing.assert_close(out[t], want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ConfigError, match="'aggr' must be one of"):
        HeteroConv(convs, aggr="max")


def _x(graph, block):
    off = {t: graph.schema.type_range(t)[0] for t in graph.schema.node_types}
    return {t: torch.from_numpy(graph.x[t]).to(D)[block.src_ids[t] - off[t]] for t in graph.x}


@pytest.mark.parametrize("conv", ["rgcn", "rgat", "hetero-sage"])
def test_sampled_with_all_neighbours_equals_full_graph(conv):
    """Typed blocks (relabelled locally) compute the full graph's rows, dropout included."""
    g = toy_mag(num_papers=40, num_authors=20, num_fields=5, featureless_fields=True, seed=1)
    torch.manual_seed(0)
    model = build_hetero_model(
        conv,
        g,
        4,
        hidden_dim=6,
        num_layers=2,
        dropout=0.3,
        heads=2,
        num_bases=2 if conv == "rgcn" else None,
    ).double()
    seeds = torch.tensor([3, 9, 17, 30])
    blocks = HeteroNeighborSampler(g, [-1, -1]).sample_from_nodes(seeds, epoch=0, step=0).blocks
    aggs = [TypedAggregator(b, dtype=D) for b in blocks]
    part = model(aggs, _x(g, blocks[0]), step=5)
    full_block = full_hetero_block(g)
    full = TypedAggregator(full_block, dtype=D)
    whole = model([full, full], _x(g, full_block), step=5)
    torch.testing.assert_close(part, whole[seeds], rtol=1e-10, atol=1e-12)


def test_featureless_types_train_embedding_rows_sparsely():
    g = toy_mag(num_papers=40, num_authors=20, num_fields=8, featureless_fields=True, seed=2)
    torch.manual_seed(0)
    sparse = build_hetero_model("rgcn", g, 4, hidden_dim=6, num_layers=2, sparse=True).double()
    dense = build_hetero_model("rgcn", g, 4, hidden_dim=6, num_layers=2).double()
    dense.load_state_dict(sparse.state_dict())
    assert set(sparse.embed) == {"field"} and "field" not in sparse.proj
    assert sparse.embed["field"].weight.shape == (8, 8)  # features of width 8: no projection
    blocks = (
        HeteroNeighborSampler(g, [2, 2], seed=3)
        .sample_from_nodes(torch.tensor([1, 2]), epoch=0, step=0)
        .blocks
    )
    aggs = [TypedAggregator(b, dtype=D) for b in blocks]
    for m in (sparse, dense):
        m(aggs, _x(g, blocks[0])).sum().backward()
    grad = sparse.embed["field"].weight.grad
    assert grad.is_sparse
    rows = set(grad.coalesce().indices()[0].tolist())
    off = g.schema.type_range("field")[0]
    assert rows <= set((blocks[0].src_ids["field"] - off).tolist())
    torch.testing.assert_close(grad.to_dense(), dense.embed["field"].weight.grad)
    untouched = sorted(set(range(8)) - rows)
    assert bool((dense.embed["field"].weight.grad[untouched] == 0).all())


def test_projections_where_widths_differ_and_errors():
    g = toy_mag(num_papers=20, num_authors=10, num_fields=4, author_dim=5, seed=0)
    m = build_hetero_model("rgcn", g, 4, hidden_dim=7)
    assert {t: lin.in_features for t, lin in m.proj.items()} == {
        "paper": 8,
        "author": 5,
        "field": 8,
    }
    assert all(lin.out_features == 7 for lin in m.proj.values())
    with pytest.raises(ConfigError, match="unknown typed model"):
        build_hetero_model("gcn", g, 4, hidden_dim=7)
    schema = HeteroSchema(("a", "b"), (2, 2), (("a", "r", "b"),), target="a")
    one_way = from_typed_edges(schema, {("a", "r", "b"): ([0, 1], [1, 0])}, y=np.array([0, 1]))
    m = HeteroGNN(schema, {"a": 3, "b": 3}, 4, 2, num_layers=1, conv="rgat")
    full = TypedAggregator(full_hetero_block(one_way))
    x = {t: torch.randn(2, 3) for t in ("a", "b")}
    with pytest.raises(ConfigError, match="add_reverse_relations"):
        m([full], x)
