import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fleetgnn.engines.common import split_metrics
from fleetgnn.errors import ConfigError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.nn import LocalAggregator
from fleetgnn.sampling import full_neighbor_block
from fleetgnn.train import Trainer, engine_from_config, load_config


@pytest.fixture(scope="module")
def graph():
    return generate_graph(spec_for("tiny", 0.3), seed=1)


def _config(**over):
    items = [f"{k}={v}" for k, v in over.items()]
    return load_config(None, ["train.dtype=float64", *items])


@pytest.mark.parametrize("model", ["gcn", "sage", "gat", "gin"])
def test_minibatch_full_fanout_equals_full_graph(graph, model, device):
    """Sampled blocks with fanout -1 give the full-graph logits for the batch's seeds; on the
    device, the CPU engine's logits too."""
    # the CPU engine (train.device's default, auto, would take the GPU where there is one)
    cfg_full = _config(**{"model.name": model, "train.mode": "full", "train.device": "cpu"})
    cfg_mb = _config(
        **{
            "model.name": model,
            "train.fanouts": "[-1,-1]",
            "train.batch_size": 37,
            "train.device": device,
        }
    )
    full = engine_from_config(cfg_full, graph)
    mb = engine_from_config(cfg_mb, graph)
    mb.model.load_state_dict(full.model.state_dict())
    for m in (full.model, mb.model):
        m.train()  # dropout on: masks are keyed by global IDs, so they agree too
    logits_full = full.model([full.full_aggregator] * 2, full.x, step=5)
    aggs, x, seeds, _ = mb.batch(epoch=0, step=1)
    logits_mb = mb.model(aggs, x, step=5)
    assert seeds.numel() > 0 and logits_mb.device.type == device
    assert logits_full.device.type == "cpu"
    torch.testing.assert_close(logits_mb.cpu(), logits_full[seeds.cpu()], rtol=1e-9, atol=1e-9)


def test_full_gradients_equal_union_of_minibatch_fanout_all(graph, device):
    """A full-graph gradient equals the sum of full-neighbour batch gradients."""
    over = {"model.name": "gcn", "train.mode": "full", "model.dropout": 0.0}
    cfg = _config(**over, **{"train.device": device})
    full = engine_from_config(cfg, graph)
    aggs = [full.full_aggregator] * 2
    logits = full.model(aggs, full.x)
    ids = full.train_ids
    loss = torch.nn.functional.cross_entropy(logits[ids], full.y[ids], reduction="sum")
    ref = torch.autograd.grad(loss, list(full.model.parameters()))
    total = [torch.zeros_like(p) for p in full.model.parameters()]
    for chunk in torch.split(ids, 50):
        blocks = [full_neighbor_block(full.topology, chunk)]
        b1 = blocks[0]
        b0 = full_neighbor_block(full.topology, b1.src_ids)
        aggs = [LocalAggregator(b.to(device), dtype=torch.float64) for b in (b0, b1)]
        out = full.model(aggs, full.x[b0.src_ids.to(device)])
        part = torch.nn.functional.cross_entropy(out, full.y[chunk.to(device)], reduction="sum")
        for t, g in zip(total, torch.autograd.grad(part, list(full.model.parameters()))):
            t += g
    for a, b in zip(total, ref):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_layerwise_inference_equals_full_forward(graph):
    cfg = _config(**{"model.name": "sage", "train.fanouts": "[3,2]"})
    eng = engine_from_config(cfg, graph)
    eng.model.eval()
    ref = eng.model([LocalAggregator.from_graph(graph, dtype=torch.float64)] * 2, eng.x)
    torch.testing.assert_close(eng.infer(chunk_size=33), ref, rtol=1e-10, atol=1e-10)


def test_training_learns(graph, tmp_path):
    cfg = _config(**{"model.name": "sage", "train.epochs": 4, "train.fanouts": "[5,5]"})
    cfg = dataclasses.replace(cfg, run_dir=str(tmp_path))
    eng = engine_from_config(cfg, graph)
    before = eng.evaluate()["val_acc"]
    summary = Trainer.from_config(eng, cfg, tmp_path, show_progress=False).fit()
    assert summary["val_acc"] > max(before + 0.15, 0.6)
    assert summary["engine"] == "reference" and summary["world_size"] == 1


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_resume_mid_run_matches_uninterrupted(graph, tmp_path, mode):
    over = {
        "model.name": "gat",
        "train.epochs": 3,
        "train.mode": mode,
        "train.batch_size": 64,
        "train.fanouts": "[4,3]",
        "train.checkpoint_every": 2,
        "model.dropout": 0.3,
    }
    cfg = _config(**over)

    ref_eng = engine_from_config(cfg, graph)
    Trainer.from_config(ref_eng, cfg, tmp_path / "a", show_progress=False).fit()

    eng = engine_from_config(cfg, graph)
    crash_at = (1, 1) if mode == "minibatch" else (1, 0)
    original = eng.train_step

    def crashing(epoch, step):
        if (epoch, step) == crash_at:
            raise KeyboardInterrupt
        return original(epoch, step)

    eng.train_step = crashing
    with pytest.raises(KeyboardInterrupt):
        Trainer.from_config(eng, cfg, tmp_path / "b", show_progress=False).fit()
    torch.manual_seed(12345)  # a resumed process starts with unrelated RNG state
    np.random.seed(999)  # noqa: NPY002 - perturbs the global state on purpose
    resumed = engine_from_config(cfg, graph)
    Trainer.from_config(resumed, cfg, tmp_path / "b", show_progress=False).fit(resume=True)
    for (name, a), b in zip(
        ref_eng.model.state_dict().items(), resumed.model.state_dict().values()
    ):
        assert torch.equal(a, b), name


def test_engine_errors(graph, monkeypatch):
    import dataclasses

    from fleetgnn.config import engines as registry

    with pytest.raises(ConfigError, match="fanouts"):
        engine_from_config(_config(**{"train.fanouts": "[5]"}), graph)
    # a registry entry without an implementation (a planned engine)
    monkeypatch.setitem(
        registry.ENGINES, "offload", dataclasses.replace(registry.ENGINES["offload"], impl="")
    )
    with pytest.raises(ConfigError, match="not available"):
        engine_from_config(_config(**{"train.engine": "offload"}), graph)


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_full_mode_evaluation_is_the_streaming_path_with_unchanged_numbers(graph, model):
    """One evaluation path: full mode feeds every node's logits to the streaming sink. The
    numbers equal the former full-graph computation (the task's sums over all logits) exactly,
    the metrics computed here from the logits, and the mini-batch mode's streamed evaluation of
    the same weights (float64)."""
    full = engine_from_config(_config(**{"model.name": model, "train.mode": "full"}), graph)
    for step in range(2):
        full.train_step(0, step)
    got = full.evaluate()
    logits = full.infer()
    assert got == split_metrics(logits, full.y, full.masks)  # bit for bit
    pred = logits.argmax(1)
    for split, mask in full.masks.items():
        assert got[f"{split}_acc"] == float((pred[mask] == full.y[mask]).double().mean())
    val = full.masks["val"]
    want = float(F.cross_entropy(logits[val], full.y[val]))
    assert got["val_loss"] == pytest.approx(want, rel=1e-12, abs=0)
    streamed = engine_from_config(
        _config(**{"model.name": model, "train.mode": "minibatch", "train.fanouts": "[-1,-1]"}),
        graph,
    )
    streamed.module.load_state_dict(full.module.state_dict())
    assert streamed.evaluate() == pytest.approx(got, rel=1e-12, abs=1e-15)
