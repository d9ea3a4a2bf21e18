"""The planner on a typed workload: only the engines that train typed graphs are planned for."""

import dataclasses

import pytest

from fleetgnn.config import ENGINES, load_config
from fleetgnn.cost import PROFILES, make_plan, workload_from_config
from fleetgnn.errors import ConfigError

SHAPE = {"nodes": 1_939_743, "edges": 21_111_007, "features": 128, "classes": 349}  # ogbn-mag


def _wl(typed, mode):
    cfg = load_config(None, ["model.name=sage", f"train.mode={mode}"])
    return dataclasses.replace(workload_from_config(cfg, shape=SHAPE), typed=typed)


def test_registry_names_the_typed_engines():
    assert [n for n, s in ENGINES.items() if s.typed] == ["reference", "minibatch", "split"]


@pytest.mark.parametrize("nproc", [1, 4])
def test_typed_workload_plans_only_typed_engines(nproc):
    hw = PROFILES["4xa100-80g-nvlink"]
    flat = make_plan(_wl(False, "full"), hw, nproc, mode="auto")
    typed = make_plan(_wl(True, "full"), hw, nproc, mode="auto")
    assert set(flat.predictions) - {"reference", "minibatch", "split"}  # others: untyped
    assert set(typed.predictions) <= {"reference", "minibatch", "split"}
    assert typed.choice in ("reference", "minibatch", "split")
    if nproc > 1:
        assert "split" in typed.predictions


def _typed_plan(model, task):
    wl = _wl(True, "minibatch")
    shape = dataclasses.replace(wl.model, name=model)
    hw = PROFILES["4xa100-80g-nvlink"]
    return make_plan(dataclasses.replace(wl, model=shape, task=task), hw, 4, mode="auto")


def test_typed_rgat_workloads_leave_split_out():
    """R-GAT (priced as GAT) does not run on split, for either task."""
    for task in ("node", "link"):
        assert "split" not in _typed_plan("gat", task).predictions, task


def test_typed_link_workloads_plan_split(monkeypatch):
    """Typed link prediction trains on split: planned, and left out once it is not listed."""
    plan = _typed_plan("sage", "link")
    assert "split" in plan.predictions
    assert set(plan.predictions) <= {"reference", "minibatch", "split"}
    monkeypatch.setattr(
        "fleetgnn.cost.planner.TYPED_LINK_ENGINES", ("reference", "minibatch")
    )  # the guard reads the list: an engine off it is never planned for typed link
    assert "split" not in _typed_plan("sage", "link").predictions
    assert "split" in _typed_plan("sage", "node").predictions


def test_typed_workload_refuses_engines_that_do_not_train_it():
    hw = PROFILES["4xa100-80g-nvlink"]
    with pytest.raises(ConfigError, match="trains typed graphs.*reference or minibatch or split"):
        make_plan(_wl(True, "full"), hw, 4, mode="full", engines=["fullgraph", "offload"])
