"""``store.device_budget=0`` trains on every engine (GPUs for real, item 3).

A zero device budget leaves the device tier empty: every feature row comes from the host tier
(of ``minibatch``'s and ``split``'s unified stores), so training reads more over the host link
but computes the same thing. Each engine trains its first epoch (two steps of the sampled
engines, the one step of the full-graph ones) with the budget at 0 and unlimited, on two ranks
for the distributed engines (one process for ``reference``, where the key has no effect), in
float64: the losses must be equal, and the sampled engines must have read nothing from a device
tier. ``offload`` bounds its device memory with its own key (``offload.device_budget``); a zero
there is refused with a message naming it (no chunk fits in zero bytes).
"""

import math

import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.offload import OffloadBudgetError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import engine_from_config, load_config

STEPS = 2
DISTRIBUTED = ["minibatch", "split", "fullgraph", "offload"]


def _graph():
    return generate_graph(spec_for("tiny", 0.3), seed=4)


def _config(engine, budget, extra=()):
    return load_config(
        None,
        [
            f"train.engine={engine}",
            "train.dtype=float64",
            "train.batch_size=48",
            "train.fanouts=[4,3]",
            "model.name=sage",
            "model.hidden=8",
            "model.dropout=0.2",
            "train.seed=3",
            f"store.device_budget={budget}",
            *extra,
        ],
    )


def _device_reads(engine_name, eng, stats):
    """What the steps read from a device tier: the store's requests served by a shard (own, peer
    or remote) for ``minibatch`` and ``split``, and the bytes the steps metered on ``local``
    (a device-tier read); else 0."""
    if engine_name in ("minibatch", "split"):
        req = eng.store.requests("features")
        return req["local"] + req["peer"] + req["net"] + sum(s.traffic["local"] for s in stats)
    return 0


def _train(engine_name, budget, comm=None):
    torch.set_num_threads(1)
    cfg = _config(engine_name, budget)
    with engine_from_config(cfg, _graph(), None if comm is None else context_of(comm)) as eng:
        out = eng.run_epoch(0)[:STEPS]
        return [(s.loss_sum, s.count) for s in out], _device_reads(engine_name, eng, out)


def _rank(comm, engine_name):
    return {b: _train(engine_name, b, comm) for b in ("0", "null")}


def test_reference_ignores_a_zero_device_budget():
    zero, _ = _train("reference", "0")
    unlimited, _ = _train("reference", "null")
    assert zero == unlimited and all(math.isfinite(v) for v, _ in zero)


@pytest.mark.slow
@pytest.mark.parametrize("engine_name", DISTRIBUTED)
def test_zero_device_budget_trains_like_an_unlimited_one(engine_name):
    out = run_world(_rank, 2, engine_name, timeout_s=300)
    for rank_out in out:
        zero, zero_reads = rank_out["0"]
        unlimited, unlimited_reads = rank_out["null"]
        assert zero and all(math.isfinite(v) for v, _ in zero)
        # (loss, count) per step: the same counts, the same losses to rounding
        assert [c for _, c in zero] == [c for _, c in unlimited]
        assert [v for v, _ in zero] == pytest.approx([v for v, _ in unlimited], rel=1e-12)
        if engine_name in ("minibatch", "split"):
            assert zero_reads == 0 < unlimited_reads  # the budget reached the device tier


def test_offload_refuses_a_zero_device_budget_by_name():
    cfg = _config("offload", "null", ["offload.device_budget=0"])
    with pytest.raises(OffloadBudgetError, match=r"offload.device_budget=0 bytes cannot hold"):
        with engine_from_config(cfg, _graph()) as eng:
            eng.run_epoch(0)
