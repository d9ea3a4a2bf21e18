"""Validation 1 (memory): the offload model's device peak is the engine's measured peak."""

import pytest

from fleetgnn.config import load_config
from fleetgnn.cost import PROFILES, predict_engine, workload_from_config
from fleetgnn.cost.offload_memory import layer_memory
from fleetgnn.cost.workload import ModelShape
from fleetgnn.distributed.testing import context_or_own, run_world
from fleetgnn.train import engine_from_config

from ..engines.test_offload import _community_graph

#: (model, ranks, knobs, dtype): test_planner's offload cases, and one in float64.
CASES = [
    ("gcn", 2, {"chunks": 4}, "float32"),
    ("gat", 2, {"chunks": 2, "partition": "range"}, "float32"),
    ("sage", 1, {"chunks": 8}, "float32"),
    ("gat", 1, {"chunks": 3, "partition": "range"}, "float64"),
]


def _sets(model, dtype):
    return [f"model.name={model}", "model.hidden=16", f"train.dtype={dtype}"]


def _peaks(comm, cases):
    """This rank's ``peak_memory()["device"]`` of one epoch, per case (``comm=None``: here)."""
    out = []
    with context_or_own(comm) as ctx:
        for model, _, knobs, dtype in cases:
            cfg = load_config(None, ["train.engine=offload", *_sets(model, dtype)])
            e = engine_from_config(cfg, _community_graph(), ctx, **knobs)
            try:
                e.run_epoch(0)
                out.append(e.peak_memory()["device"])
            finally:
                e.close()
    return out


@pytest.fixture(scope="module")
def measured():
    """The fullest rank's peak per case (the two-rank cases share one spawned world)."""
    pairs = [c for c in CASES if c[1] == 2]
    per_rank = run_world(_peaks, 2, pairs, timeout_s=300)
    peaks = dict(zip(map(repr, pairs), map(max, zip(*per_rank, strict=True)), strict=True))
    singles = [c for c in CASES if c[1] == 1]
    peaks.update(zip(map(repr, singles), _peaks(None, singles), strict=True))
    return peaks


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-W{c[1]}-{c[3]}")
def test_predicted_device_peak_within_10_percent_of_measured(case, measured):
    """The offload model's ``memory["device"]`` within 10% of the engine's measured peak."""
    model, world, knobs, dtype = case
    cfg = load_config(None, [*_sets(model, dtype), "train.mode=full"])
    wl = workload_from_config(cfg, graph=_community_graph())
    pred = predict_engine("offload", wl, PROFILES["dgx-a100"], world, knobs)
    want = measured[repr(case)]
    assert abs(pred.memory["device"] - want) <= 0.10 * want, (pred.memory, want)


def test_saved_bytes_are_linear_in_the_chunk_counts():
    """The probe coefficients are whole bytes per row, edge and destination (a linear model)."""
    for elem in (4, 8):
        shape = ModelShape.build("gat", 8, 6, elem=elem, hidden_dim=4, heads=2)
        mem = layer_memory(shape, shape.cacheable)
        assert len(mem) == 2 and mem[0].per_edge > 0  # attention scores per edge and head
        assert mem[1].per_train > 0 and mem[0].per_train == 0  # the loss: last layer only
        coeffs = [c for m in mem for c in (m.const, m.per_row, m.per_edge, m.per_dst)]
        assert all(float(c).is_integer() for c in coeffs)
