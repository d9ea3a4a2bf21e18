"""The fullgraph engine against the single-process reference (gloo worlds), and the tuner."""

import functools

import numpy as np
import pytest
import torch

from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.fullgraph import GreedyTuner, TunerSpace
from fleetgnn.errors import ConfigError
from fleetgnn.graph import from_edges
from fleetgnn.train import engine_from_config, load_config, read_metrics

EPOCHS = 2


def _graph(kind: str):
    """Small labelled graphs: ``loops`` (self loops + duplicates), ``plain`` (no self loops),
    ``split`` (two equal disconnected halves: no remote edges at world size 2)."""
    n, iso = 30, 3  # the last `iso` nodes are isolated
    rng = np.random.default_rng({"loops": 1, "plain": 2, "split": 3}[kind])
    if kind == "split":
        h = n // 2
        s0, d0 = rng.integers(0, h, 50), rng.integers(0, h, 50)
        s0[0], d0[0] = 0, h - 1  # the last node of a half has an in-edge: the split is exact
        src, dst = np.concatenate([s0, s0 + h]), np.concatenate([d0, d0 + h])
    else:
        src, dst = rng.integers(0, n - iso, 110), rng.integers(0, n - iso, 110)
        src[:8] = 4  # a hub
        if kind == "loops":
            src[10:14] = dst[10:14]
    if kind != "loops":
        keep = src != dst
        src, dst = src[keep], dst[keep]
    split = rng.integers(0, 3, n)
    train = split == 0
    data = {
        "x": rng.standard_normal((n, 5)),
        "y": rng.integers(0, 3, n),
        "train_mask": train,
        "val_mask": split == 1,
        "test_mask": split == 2,
    }
    return from_edges(src, dst, n, node_data=data, num_classes=3, name=kind)


def _config(model: str, extra=(), engine: str = "fullgraph"):
    """The float64 full-graph run config every engine test compares with the reference."""
    return load_config(
        None,
        [
            f"train.engine={engine}",
            "train.mode=full",
            "train.dtype=float64",
            f"model.name={model}",
            "model.hidden=4",
            "model.dropout=0.3",
            "optim.optimizer=sgd",
            "optim.lr=0.5",
            "optim.weight_decay=0",
            "train.seed=7",
        ]
        + (["model.heads=2"] if model == "gat" else [])
        + list(extra),
    )


def _cases(world_size: int):
    """(model, graph kind, K, depth, partition, tune) per world."""
    cases = []
    for model in ("gcn", "sage", "gin", "gat"):
        kind = "loops" if model in ("sage", "gin") else "plain"
        for k, depth in ((1, 1), (2, 2), (7, 0)):
            cases.append((model, kind, k, depth, "range", False))
    if world_size == 2:
        cases.append(("gcn", "split", 2, 1, "range", False))
        cases.append(("sage", "loops", None, None, "range", True))
    if world_size == 3:
        cases.append(("gat", "plain", 2, 1, "metis", False))
        cases.append(("gin", "loops", 3, 1, "metis", False))
    return cases


def _rank(comm, device="cpu"):
    out = []
    for model, kind, k, depth, part, tune in _cases(comm.world_size):
        engine = engine_from_config(
            _config(model, [f"train.device={device}"]),
            _graph(kind),
            context_of(comm),
            partition=part,
            num_chunks=k,
            depth=depth,
            tune=tune,
        )
        res = {"loss_sum": [], "count": [], "extra": []}
        for epoch in range(EPOCHS + (2 if tune else 0)):
            (st,) = engine.run_epoch(epoch)
            res["loss_sum"].append(st.loss_sum)
            res["count"].append(st.count)
            res["extra"].append(engine.epoch_extra())
            res.setdefault("traffic", st.traffic)
            if epoch == 0:
                res["grads"] = {n: p.grad.cpu() for n, p in engine.module.named_parameters()}
        res["params"] = {n: p.detach().cpu() for n, p in engine.module.named_parameters()}
        res["eval"] = engine.evaluate()
        res["layout"] = engine.layout
        engine.close()
        out.append(res)
    return out


@functools.cache
def _reference(model, kind, epochs):
    ref = engine_from_config(_config(model, ["train.device=cpu"]), _graph(kind), engine="reference")
    losses, grads = [], None
    for epoch in range(epochs):
        (st,) = ref.run_epoch(epoch)
        losses.append(st.loss_sum / st.count)
        if epoch == 0:
            grads = {n: p.grad.clone() for n, p in ref.model.named_parameters()}
    params = {n: p.detach().clone() for n, p in ref.model.named_parameters()}
    return losses, grads, params, ref.evaluate()


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_matches_reference(world_size, device):
    """On ``cuda`` the ranks share the GPU; the reference stays on the CPU."""
    if device == "cuda" and world_size > 2:
        pytest.skip("one GPU: the shared-GPU mode is tested at W = 1 and 2")
    results = run_world(_rank, world_size, device, timeout_s=300, device=device)
    for i, (model, kind, k, depth, part, tune) in enumerate(_cases(world_size)):
        per_rank = [r[i] for r in results]
        epochs = EPOCHS + (2 if tune else 0)
        losses, grads, params, ev = _reference(model, kind, epochs)
        what = f"{model}/{kind}/K={k}/depth={depth}/{part}/W={world_size}"
        for e in range(epochs):
            total = sum(r["loss_sum"][e] for r in per_rank) / sum(r["count"][e] for r in per_rank)
            assert total == pytest.approx(losses[e], rel=1e-9, abs=1e-12), what
        for r in per_rank:
            for n in grads:
                why = f"{what} {n}"
                for got, want in ((r["grads"][n], grads[n]), (r["params"][n], params[n])):
                    torch.testing.assert_close(
                        got, want, rtol=1e-7, atol=1e-9, msg=lambda m, w=why: f"{w}: {m}"
                    )
            assert r["eval"] == pytest.approx(ev, rel=1e-9), what
            ex = r["extra"][0]
            if world_size == 1 or kind == "split":
                assert r["layout"].num_remote_edges == 0
                assert ex["volume_mgg_bytes"] == 0 and ex["exchanges"] == 0
                if world_size == 1:
                    assert r["traffic"].get("peer", 0) == 0
            assert 0.0 <= ex["hidden_fraction"] <= 1.0
            # the backward's halo gradients went through the pipelined reverse exchanges
            if world_size == 1 or kind == "split":
                assert ex["backward_exchanges"] == 0, what
            else:
                assert ex["backward_exchanges"] > 0, what
            if model == "gcn":  # every layer aggregates a tensor that needs a gradient
                assert ex["backward_exchanges"] == ex["exchanges"], what
            assert ex["volume_mgg_bytes"] >= ex["volume_dedup_bytes"]
            if tune:
                assert r["extra"][-1]["tuner"]["trials"] >= 1
                # every rank takes the same decisions
                assert [x["num_chunks"] for x in r["extra"]] == [
                    x["num_chunks"] for x in per_rank[0]["extra"]
                ]


# ---------------------------------------------------------------------------------- tuner
def _oracle(best_k, best_d):
    """Deterministic convex latency with its minimum at (best_k, best_d)."""
    return lambda k, d: 1.0 + abs(np.log2(k) - np.log2(best_k)) + 0.3 * abs(d - best_d)


def _search(tuner, oracle):
    trials = []
    for _ in range(50):
        if tuner.done:
            break
        c = tuner.propose()
        trials.append(c)
        tuner.report(c, oracle(*c))
    return trials


@pytest.mark.parametrize("best", [(1, 1), (4, 3), (16, 4), (2, 1), (8, 2)])
def test_tuner_finds_minimum_of_separable_oracle(best):
    space = TunerSpace()
    tuner = GreedyTuner(space)
    trials = _search(tuner, _oracle(*best))
    assert tuner.done and len(trials) <= 10
    assert tuner.best == best
    for k, d in trials:  # stays in range
        assert k in space.chunks and d in space.depth
    assert tuner.best == min(tuner.table, key=tuner.table.get)  # argmin of its table
    assert tuner.propose() == tuner.best
    # deterministic for a deterministic oracle
    again = GreedyTuner(space)
    assert _search(again, _oracle(*best)) == trials and again.best == tuner.best


def test_tuner_noisy_oracle_returns_table_argmin_and_respects_cap():
    rng = np.random.default_rng(0)
    noise = {(k, d): float(rng.random()) for k in (1, 2, 4, 8, 16) for d in (1, 2, 3, 4)}
    tuner = GreedyTuner(max_trials=4)
    trials = _search(tuner, lambda k, d: noise[(k, d)])
    assert len(trials) <= 4 and tuner.done
    assert tuner.best == min(tuner.table, key=tuner.table.get)
    assert "GreedyTuner(" in repr(tuner)


def test_tuner_and_engine_reject_bad_knobs():
    with pytest.raises(ConfigError, match="chunks"):
        TunerSpace(chunks=(4, 2))
    with pytest.raises(ConfigError, match="max_trials"):
        GreedyTuner(max_trials=0)
    cfg = load_config(None, ["train.engine=fullgraph", "train.mode=full"])
    with pytest.raises(ConfigError, match="partition"):
        engine_from_config(cfg, _graph("plain"), None, partition="hash")


def test_build_engine_knows_fullgraph():
    with pytest.raises(ConfigError, match="mode"):  # the config or the engine refuses it
        cfg = load_config(None, ["train.engine=fullgraph", "train.mode=minibatch"])
        engine_from_config(cfg, _graph("plain"), object())


def test_tuner_state_round_trips_mid_search():
    """A tuner restored from :meth:`GreedyTuner.state_dict` mid-search proposes the same trials
    and settles on the same best as the one that was never interrupted."""
    oracle = _oracle(4, 2)
    whole, part = GreedyTuner(), GreedyTuner()
    trials = _search(whole, oracle)
    for _ in range(3):
        c = part.propose()
        part.report(c, oracle(*c))
    resumed = GreedyTuner()
    resumed.load_state_dict(part.state_dict())
    assert trials[:3] + _search(resumed, oracle) == trials
    assert resumed.best == whole.best and resumed.done
    with pytest.raises(ConfigError, match="tuner_"):  # searched over other candidates
        GreedyTuner(TunerSpace(chunks=(1, 2))).load_state_dict(part.state_dict())


def _fit_resumed(comm, data, root):
    """One fullgraph run to 7 steps, one stopped at step 3 (mid-search) and resumed to 7."""
    from pathlib import Path

    from fleetgnn.graph import open_dataset
    from fleetgnn.train import Trainer
    from fleetgnn.train.checkpoint import load_checkpoint

    torch.set_num_threads(1)
    # the tuner sees latencies that are the same in every run (its best is (2, 2) after 5
    # trials), so both runs search alike and only the restart can make them differ
    oracle = _oracle(2, 2)
    real = GreedyTuner.report
    GreedyTuner.report = lambda self, c, _latency: real(self, c, oracle(*c))

    def fit(run: str, max_steps: int, resume: bool) -> None:
        cfg = load_config(
            None,
            [
                "train.engine=fullgraph",
                "train.nproc=2",
                "train.epochs=7",
                f"train.max_steps={max_steps}",
                "train.checkpoint_interval=0",
                "model.hidden=8",
            ],
        )
        with engine_from_config(cfg, open_dataset(data), context_of(comm)) as eng:
            trainer = Trainer.from_config(eng, cfg, Path(root) / run, quiet=True)
            trainer.fit(resume=resume, overwrite=not resume)
        comm.barrier()  # rank 0 has written the run's files (separate launches in the CLI)

    fit("whole", 7, False)
    fit("restarted", 3, False)
    fit("restarted", 7, True)
    if comm.rank != 0:
        return None
    out = {}
    for run in ("whole", "restarted"):
        ckpt = load_checkpoint(Path(root) / run / "checkpoints" / "last.pt")
        records = read_metrics(Path(root) / run / "metrics.jsonl")
        losses = [r["loss"] for r in records]
        chunks = [r["extra"]["num_chunks"] for r in records]
        out[run] = (ckpt["engine"]["model"], losses, chunks)
    return out


@pytest.mark.slow
def test_restarted_tuned_run_is_bit_identical_to_uninterrupted(tmp_path):
    """Issue 30, finding 9: resuming a fullgraph run stopped mid-search continues the tuner's
    search (checkpointed) instead of searching afresh, so it ends bit-identical to the
    uninterrupted run with the default tuner on."""
    from fleetgnn.graph import write_dataset
    from fleetgnn.graph.synthetic import generate_graph, spec_for

    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path / "d")
    out = run_world(_fit_resumed, 2, str(data), str(tmp_path), timeout_s=120)[0]
    (params_a, losses_a, chunks_a), (params_b, losses_b, chunks_b) = out["whole"], out["restarted"]
    assert losses_a == losses_b
    for name, value in params_a.items():
        assert torch.equal(value, params_b[name]), name
    assert chunks_a == chunks_b == [1, 2, 4, 2, 2, 2, 2], (chunks_a, chunks_b)
