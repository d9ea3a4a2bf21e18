"""The planner counts feature rows as the store holds them (``store.feature_dtype``, issue 40):
stored bytes per row in the tiers, so a budget fits more rows, and the plan says so."""

import dataclasses

import pytest

from fleetgnn.config import load_config
from fleetgnn.cost import PROFILES, ModelShape, Workload, make_plan, workload_from_config
from fleetgnn.cost.store_model import plan_feature_cache
from fleetgnn.errors import ConfigError
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.synthetic import SyntheticSpec, generate_graph
from fleetgnn.store import TierBudgets, plan_store

DGX1 = PROFILES["dgx1-v100"]
F = 100  # products-like feature width


def _shape(feature_dtype):
    """A papers100M-sized graph (features do not fit one device) of products' width."""
    model = ModelShape.build("sage", F, 47, num_layers=2, hidden_dim=256)
    return Workload(
        100_000_000,
        1_600_000_000,
        F,
        47,
        1_000_000,
        model,
        batch_size=1024,
        fanouts=(10, 25),
        feature_dtype=feature_dtype,
    )


def test_workload_counts_the_stored_row_bytes():
    assert _shape(None).feature_row_bytes() == 4 * F
    assert _shape("float32").feature_row_bytes() == 4 * F
    assert _shape("bfloat16").feature_row_bytes() == 2 * F
    assert _shape("float16").feature_row_bytes() == 2 * F
    assert _shape("float8_e4m3").feature_row_bytes() == F + 4
    for name in ("bfloat16", "float8_e4m3"):
        assert _shape(name).feature_row_bytes() == feature_codec(name).row_bytes(F)
    with pytest.raises(ConfigError, match="'bf17' is not a stored feature dtype"):
        _shape("bf17")


def test_bfloat16_fits_twice_the_rows_in_the_same_device_budget():
    budget = 8 * 2**30  # 8 GiB of one device for features first: ~21M float32 rows of 400 B
    plans = {
        d: plan_feature_cache(_shape(d), DGX1, 1, device_budget=budget, order="features_first")
        for d in (None, "bfloat16", "float8_e4m3")
    }
    f32, bf16, fp8 = plans[None], plans["bfloat16"], plans["float8_e4m3"]
    assert (f32.row_bytes, bf16.row_bytes, fp8.row_bytes) == (4 * F, 2 * F, F + 4)
    assert bf16.feature_dtype == "bfloat16" and bf16.to_dict()["row_bytes"] == 2 * F
    rows = {d: p.device_bytes["features"] / p.row_bytes for d, p in plans.items()}
    assert rows[None] == budget // (4 * F)  # the budget, filled with whole rows
    assert rows["bfloat16"] == budget // (2 * F)  # 2x the rows
    assert rows["float8_e4m3"] == budget // (F + 4)  # ~3.8x
    assert bf16.cache_ratio == pytest.approx(2 * f32.cache_ratio, rel=1e-6)
    assert bf16.feature_hit > f32.feature_hit  # more of the hot rows on the device


def test_the_exact_plan_counts_stored_bytes_as_the_store_plans_them():
    g = generate_graph(
        SyntheticSpec(
            num_nodes=4000,
            num_edges=40_000,
            num_features=F,
            num_classes=4,
            train_frac=0.3,
            val_frac=0.1,
            test_frac=0.1,
        ),
        seed=0,
    )
    budget = 300 * 4 * F  # 300 float32 rows, 600 bfloat16 rows
    wls = {}
    for d in (None, "bfloat16"):
        sets = ["model.name=sage", "train.fanouts=[5,5]", "train.batch_size=64"]
        if d is not None:
            sets.append(f"store.feature_dtype={d}")
        wls[d] = workload_from_config(load_config(None, sets), graph=g)
    assert wls["bfloat16"].feature_dtype == "bfloat16"
    plans = {
        d: plan_feature_cache(wl, DGX1, 1, device_budget=budget, order="features_first")
        for d, wl in wls.items()
    }
    for d, p in plans.items():  # the rows the store's own plan puts on the device
        want = plan_store(
            g,
            TierBudgets(device=budget, host=2**40),
            1,
            order="features_first",
            feature_dtype=d,
        ).features.num_device
        assert p.cache_ratio * g.num_nodes == want
    assert plans[None].cache_ratio * g.num_nodes == 300
    assert plans["bfloat16"].cache_ratio * g.num_nodes == 600
    assert plans["bfloat16"].device_bytes["features"] == plans[None].device_bytes["features"]


def test_the_plan_says_the_stored_dtype_and_bytes_per_row():
    shape = {"nodes": 2_000_000, "edges": 60_000_000, "features": F, "classes": 47}
    for d, row in ((None, 4 * F), ("bf16", 2 * F), ("fp8", F + 4)):
        sets = ["model.name=sage", "train.fanouts=[10,10]"]
        if d is not None:
            sets.append(f"store.feature_dtype={d}")
        wl = workload_from_config(load_config(None, sets), shape=shape)
        plan = make_plan(wl, DGX1, 1, mode="minibatch", engines=["minibatch"])
        assert plan.workload["feature_row_bytes"] == row
        assert plan.to_dict()["workload"]["feature_dtype"] == wl.feature_dtype
        if d is None:
            assert "store.feature_dtype" not in plan.reason
        else:
            assert f"stored as {wl.feature_dtype} (store.feature_dtype): {row} B per row" in (
                plan.reason
            )
            assert "its store's tiers hold them" in plan.reason


def test_modelled_minibatch_traffic_counts_stored_bytes():
    """Counts only, every row on the host tier: the gathered h2d feature bytes halve."""
    wl = _shape(None)
    wl16 = dataclasses.replace(wl, feature_dtype="bfloat16")
    from fleetgnn.cost.minibatch_store import modelled_store, presample, store_loads

    s = presample(wl)
    loads = {}
    for w in (wl, wl16):
        store = modelled_store(w, 1, 0, 2**50, "graph_first")  # nothing on the device
        loads[w.feature_dtype] = store_loads(w, 1, 1, 1, s, store)["h2d"]
    topo = loads[None] - s["input_rows"] * 4 * F
    assert loads["bfloat16"] - topo == pytest.approx(s["input_rows"] * 2 * F)
