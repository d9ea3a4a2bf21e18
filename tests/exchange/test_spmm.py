"""The pipelined weighted sum over exchanged rows: single-rank equality with gspmm, and in real
gloo worlds with non-contiguous owners (random owner array, hash owner function on a sampled
block), forward and backward (x and edge weights) equal the single-process gspmm in float64 for
every (K, depth), on the pipelined and the autograd backward paths, with closed-form traffic."""

import numpy as np
import pytest
import torch

from fleetgnn.errors import ConfigError
from fleetgnn.exchange import HaloSpmm, build_plan
from fleetgnn.ops import gspmm

from . import worlds


def test_single_rank_equals_gspmm_and_checks_rows():
    sc = worlds.scenario("graph", 1)
    lay = sc.layout(0)
    plan = build_plan(lay, np.zeros(0, np.int64), np.zeros(1, np.int64), 3)
    spmm = HaloSpmm(lay, plan, None, depth=2)
    assert lay.num_halo == 0 and lay.num_local_edges == lay.num_edges
    truth = sc.truth()
    for weighted in (False, True):
        x = sc.x.clone().requires_grad_(True)
        w = sc.w.clone().requires_grad_(True) if weighted else None
        y = spmm.sum(x, w)
        y.backward(sc.up)
        y_ref, gx_ref, gw_ref = truth[weighted]
        torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(x.grad, gx_ref, rtol=1e-12, atol=1e-12)
        if weighted:
            torch.testing.assert_close(w.grad, gw_ref, rtol=1e-12, atol=1e-12)
    # the combined structure over [x; halo] is the whole graph here
    torch.testing.assert_close(gspmm(spmm.structure, sc.x), truth[False][0])
    assert spmm.times.exchanges == 0 and "HaloSpmm(" in repr(spmm)
    with pytest.raises(ConfigError, match="rows"):
        spmm.sum(sc.x[:3])
    with pytest.raises(ConfigError, match="edge_weight"):
        spmm.sum(sc.x, sc.w[:3])


@pytest.mark.slow
@pytest.mark.parametrize("ws", [2, 3])
def test_forward_and_backward_equal_single_process(ws):
    results = worlds.world(ws)
    checked = 0
    for name in worlds.SCENARIOS:
        sc = worlds.scenario(name, ws)
        truth = sc.truth()
        for rank, res in enumerate(results):
            view = res[name]["view"]
            for (k, depth), case in res[name]["cases"].items():
                for (overlap, weighted), run in case["runs"].items():
                    what = f"{name}/rank {rank}/K={k}/depth={depth}/overlap={overlap}/w={weighted}"
                    y_ref, gx_ref, gw_ref = truth[weighted]
                    tol = {"rtol": 1e-12, "atol": 1e-12, "msg": what}
                    torch.testing.assert_close(run["y"], y_ref[view["dst"]], **tol)
                    torch.testing.assert_close(run["gx"], gx_ref[view["rows"]], **tol)
                    if weighted:
                        torch.testing.assert_close(run["gw"], gw_ref[view["eids"]], **tol)
                    else:
                        assert run["gw"] is None
                    checked += 1
        # every destination and every row is covered by exactly one rank
        dst = np.concatenate([res[name]["view"]["dst"] for res in results])
        rows = np.concatenate([res[name]["view"]["rows"] for res in results])
        assert np.array_equal(np.sort(dst), np.arange(sc.num_dst))
        assert np.array_equal(np.sort(rows), np.arange(sc.ids.size))
    assert checked == len(worlds.SCENARIOS) * ws * len(worlds.CASES) * 4


@pytest.mark.slow
@pytest.mark.parametrize("ws", [2, 3])
def test_both_backward_paths_agree_and_traffic_is_closed_form(ws):
    results = worlds.world(ws)
    row = worlds.ROW_BYTES
    for name in worlds.SCENARIOS:
        for res in results:
            lay = res[name]["layout"]
            for (k, depth), case in res[name]["cases"].items():
                plan = case["plan"]
                active = sum(plan.active)
                sent = sum(sum(c) for c in plan.send_counts)
                msgs_fwd = sum(int(np.count_nonzero(c)) for c in plan.send_counts)
                msgs_bwd = sum(int(np.count_nonzero(c)) for c in plan.recv_counts)
                for weighted in (False, True):
                    new, old = case["runs"][(True, weighted)], case["runs"][(False, weighted)]
                    what = f"{name}/K={k}/depth={depth}/w={weighted}"
                    assert torch.equal(new["y"], old["y"]), what
                    torch.testing.assert_close(new["gx"], old["gx"], rtol=0, atol=1e-13)
                    for run in (new, old):
                        # forward sends the requested rows; backward returns one gradient row
                        # per halo row (deduplicated), to the owners
                        assert run["fwd_traffic"] == (sent * row, msgs_fwd, 0), what
                        assert run["traffic"] == (
                            (sent + lay.num_halo) * row,
                            msgs_fwd + msgs_bwd,
                            0,
                        ), what
                        assert run["exchanges"] == active, what
                        assert run["dedup_bytes"] == lay.num_halo * row, what
                        assert run["mgg_bytes"] == lay.num_remote_edges * row, what
                        assert 0.0 <= run["hidden"] <= 1.0
                    # the pipelined path issued the transposed exchanges itself
                    assert new["backward_exchanges"] == active, what
                    assert old["backward_exchanges"] == 0, what
