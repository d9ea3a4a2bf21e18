"""Offload's overlapped transfers: the double-buffered chunk loop equals the blocking one.

In one process (W = 1) on every device of the ``device`` fixture; W = 2 runs the overlapped
path in ``test_offload.py::test_matches_reference`` (the default) and the blocking path there too.
"""

import pytest
import torch

from fleetgnn.train import engine_from_config

from .test_fullgraph import _graph
from .test_offload import _config

EPOCHS = 2
CASES = [
    ("gcn", "plain", {"chunks": 3}),  # cached aggregates (hybrid backward)
    ("sage", "loops", {"chunks": 7, "partition": "range", "cache_aggregates": False}),
    ("gat", "plain", {"chunks": 4, "reorganize": False}),
    ("gin", "loops", {"chunks": 1}),
]


def _run(model, kind, changes, device, overlap):
    cfg = _config(model, [f"train.device={device}"])
    engine = engine_from_config(cfg, _graph(kind), None, overlap_transfers=overlap, **changes)
    out = {"loss": [], "grads": [], "extra": []}
    try:
        for epoch in range(EPOCHS):
            (st,) = engine.run_epoch(epoch)
            out["loss"].append(st.loss_sum)
            out["grads"].append([p.grad.cpu().clone() for p in engine.module.parameters()])
            out["extra"].append(engine.epoch_extra())
        out["H"] = [h.clone() for h in engine.H]
        out["G"] = [g.clone() for g in engine.G if g is not None]
        out["rows"] = engine.rank_extra()["rows"]
        out["peak"] = engine.rank_extra()["peak_device_bytes"]
        out["eval"] = engine.evaluate()
        out["pinned"] = [h.is_pinned() for h in engine.H]
    finally:
        engine.close()
    return out


def _values(run: dict) -> list[torch.Tensor]:
    """Every gradient and stored vertex row of a run, on the CPU."""
    return [x for g in run["grads"] for x in g] + [t.cpu() for t in (*run["H"], *run["G"])]


def _bitwise(a: dict, b: dict) -> bool:
    return a["loss"] == b["loss"] and all(
        torch.equal(x, y) for x, y in zip(_values(a), _values(b), strict=True)
    )


@pytest.mark.parametrize(("model", "kind", "changes"), CASES, ids=lambda c: str(c))
def test_overlapped_equals_blocking_bit_for_bit(model, kind, changes, device):
    on = _run(model, kind, changes, device, True)
    off = _run(model, kind, changes, device, False)
    if not _bitwise(on, off) and device != "cpu":
        # a device whose reductions are not deterministic (atomic adds in a different order)
        # gives a blocking run that differs from another blocking run: then the two paths
        # agree to rounding, not bit for bit. Where two blocking runs are identical, the
        # overlapped one must be too.
        again = _run(model, kind, changes, device, False)
        assert not _bitwise(off, again), "overlapped differs from blocking, which repeats"
        for x, y in zip(_values(on), _values(off), strict=True):
            torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(on["loss"], off["loss"], rtol=1e-12, atol=0.0)
        assert on["eval"] == pytest.approx(off["eval"], rel=1e-9, abs=1e-12)
    else:
        assert _bitwise(on, off)
        assert on["eval"] == off["eval"]
    assert on["rows"] == off["rows"]  # the same rows cross each channel
    for e_on, e_off in zip(on["extra"], off["extra"], strict=True):
        assert e_on["overlap_transfers"] and not e_off["overlap_transfers"]
        assert e_on["transfers"] == e_off["transfers"]  # the same copies, in another order
        assert e_on["transfer_s"] > 0 and e_on["transfer_wait_s"] >= 0
        assert 0.0 <= e_on["hidden_fraction"] <= 1.0
        assert e_off["hidden_fraction"] == 0.0  # blocking: the caller waits for every copy
    # the copies in flight beside a chunk are live device bytes too (one chunk: none ahead)
    assert on["peak"] > off["peak"] if changes["chunks"] > 1 else on["peak"] == off["peak"]
    assert all(on["pinned"]) == (device == "cuda")
    assert not any(off["pinned"])


@pytest.mark.parametrize(("model", "budget"), [("gcn", 5000), ("gat", 8000)])
def test_overlap_honours_the_device_budget(model, budget):
    """The predicted peak covers the copies in flight: the chunks chosen fit, measured.

    (gcn at 5000 bytes exceeds its budget when the prediction leaves the copies out.)
    """
    for overlap in (True, False):
        engine = engine_from_config(
            _config(model), _graph("plain"), None, device_budget=budget, overlap_transfers=overlap
        )
        try:
            engine.run_epoch(0)
            assert engine.num_chunks > 1
            assert engine.rank_extra()["peak_device_bytes"] <= budget
        finally:
            engine.close()
