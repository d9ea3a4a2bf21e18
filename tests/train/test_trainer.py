import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

import fleetgnn.train.checkpoint as ckmod
from fleetgnn.config import Config, load_config, save_config
from fleetgnn.engines.base import LINK_KINDS, TIME_KEYS, Engine, EngineBase, StepCallback, StepStats
from fleetgnn.errors import ConfigError
from fleetgnn.train.checkpoint import CheckpointDir
from fleetgnn.train.metrics import read_metrics
from fleetgnn.train.sums import aggregate_steps
from fleetgnn.train.trainer import Trainer


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not under test here (atomic renames are); fsync is slow on busy disks."""
    monkeypatch.setattr(ckmod.os, "fsync", lambda fd: None)


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    """The tensors are tiny; intra-op threads only contend for the CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class LogRegEngine(EngineBase):
    """Logistic regression with Adam, float64; batches and dropout keyed by (seed, epoch, step).

    ``global_rng=True`` draws the dropout mask from torch's global generator instead, so exact
    resumption then also depends on the Trainer restoring RNG states.
    """

    name = "fake"

    def __init__(
        self,
        seed: int = 0,
        n: int = 240,
        f: int = 6,
        c: int = 3,
        batch: int = 32,
        crash_before: tuple[int, int] | None = None,
        crash_after: tuple[int, int] | None = None,
        global_rng: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.seed, self.batch, self.global_rng = seed, batch, global_rng
        self.crash_before, self.crash_after = crash_before, crash_after
        self.rank, self.world_size = rank, world_size
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, f, generator=g, dtype=torch.float64)
        teacher = torch.randn(f, c, generator=g, dtype=torch.float64)
        noise = 1.5 * torch.randn(n, c, generator=g, dtype=torch.float64)
        self.y = (self.x @ teacher + noise).argmax(1)
        perm = torch.randperm(n, generator=g)
        self.train, self.val, self.test = (
            perm[: n // 2],
            perm[n // 2 : 3 * n // 4],
            perm[3 * n // 4 :],
        )
        self.model = torch.nn.Linear(f, c, dtype=torch.float64)
        with torch.no_grad():
            self.model.weight.copy_(0.1 * torch.randn(c, f, generator=g, dtype=torch.float64))
            self.model.bias.zero_()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.05)
        self.calls: list[tuple[int, int]] = []

    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train) / self.batch)

    def run_epoch(
        self, epoch: int, start_step: int = 0, on_step: StepCallback | None = None
    ) -> list[StepStats]:
        self.calls.append((epoch, start_step))
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = self.train[torch.randperm(len(self.train), generator=gen)]
        out = []
        for step in range(start_step, self.steps_per_epoch()):
            if self.crash_before == (epoch, step):
                raise KeyboardInterrupt
            idx = order[step * self.batch : (step + 1) * self.batch]
            if self.global_rng:
                keep = torch.rand(len(idx), self.x.shape[1], dtype=torch.float64) > 0.2
            else:
                g = torch.Generator().manual_seed(hash((self.seed, epoch, step)) % (1 << 62))
                keep = torch.rand(len(idx), self.x.shape[1], generator=g, dtype=torch.float64) > 0.2
            xb = self.x[idx] * keep / 0.8
            logits = self.model(xb)
            loss = F.cross_entropy(logits, self.y[idx], reduction="sum")
            self.opt.zero_grad()
            (loss / len(idx)).backward()
            self.opt.step()
            stats = StepStats(
                loss_sum=loss.item(),
                correct=int((logits.argmax(1) == self.y[idx]).sum()),
                count=len(idx),
                times={"forward": 0.001, "total": 0.002},
                traffic={"local": xb.numel() * 8},
            )
            out.append(stats)
            if on_step is not None:
                on_step(step, stats)
            if self.crash_after == (epoch, step):
                raise KeyboardInterrupt
        return out

    def evaluate(self) -> dict[str, float]:
        with torch.no_grad():
            logits = self.model(self.x)
            pred = logits.argmax(1)

            def acc(ids: torch.Tensor) -> float:
                return float((pred[ids] == self.y[ids]).double().mean())

            return {
                "train_acc": acc(self.train),
                "val_acc": acc(self.val),
                "test_acc": acc(self.test),
                "val_loss": float(F.cross_entropy(logits[self.val], self.y[self.val])),
            }

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optim": self.opt.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])


class ScriptedEngine(EngineBase):
    """Reports preset step stats and preset evaluation results (per epoch)."""

    name = "scripted"
    rank = 0
    world_size = 1

    def __init__(self, steps: Sequence[StepStats], evals: Sequence[Mapping[str, float]]) -> None:
        self.steps, self.evals = list(steps), list(evals)
        self.epoch = -1
        self.calls: list[tuple[int, int]] = []
        self.evaluated: list[int] = []

    def steps_per_epoch(self) -> int:
        return len(self.steps)

    def run_epoch(
        self, epoch: int, start_step: int = 0, on_step: StepCallback | None = None
    ) -> list[StepStats]:
        self.calls.append((epoch, start_step))
        self.epoch = epoch
        for i in range(start_step, len(self.steps)):
            if on_step is not None:
                on_step(i, self.steps[i])
        return self.steps[start_step:]

    def evaluate(self) -> dict[str, float]:
        self.evaluated.append(self.epoch)
        return dict(self.evals[self.epoch])

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch = int(state["epoch"])


def _cfg(*items: str) -> Config:
    return load_config(overrides=list(items))


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


def _fit(
    engine: Any, cfg: Config, run_dir: Path, resume: bool = False, overwrite: bool = False
) -> dict[str, Any]:
    return Trainer.from_config(engine, cfg, run_dir, console=_quiet(), show_progress=False).fit(
        resume, overwrite
    )


def _params(engine: LogRegEngine) -> dict[str, torch.Tensor]:
    out = {f"p.{k}": v.clone() for k, v in engine.model.state_dict().items()}
    for pid, st in engine.opt.state_dict()["state"].items():
        for k, v in st.items():
            out[f"opt.{pid}.{k}"] = torch.as_tensor(v).clone()
    return out


def _assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


_PER_EPOCH_KEYS = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "val_loss", "num_steps")


def test_every_registered_engine_implements_the_protocol() -> None:
    """What the Trainer calls, checked on the real engine classes (not on a test double): the
    protocol's attributes and methods exist with the parameters the Trainer passes."""
    import inspect

    from fleetgnn.config import ENGINES
    from fleetgnn.engines import engine_class

    calls = {  # method -> the parameters the Trainer passes by name or position
        "steps_per_epoch": [],
        "run_epoch": ["epoch", "start_step", "on_step"],
        "evaluate": [],
        "state_dict": [],
        "load_state_dict": ["state"],
        "close": [],
    }
    for name in ENGINES:
        cls = engine_class(name)
        assert getattr(cls, "name", None) == name, name
        assert hasattr(cls, "world_size") and hasattr(cls, "rank"), name
        for method, params in calls.items():
            fn = getattr(cls, method, None)
            assert callable(fn), (name, method)
            sig = list(inspect.signature(fn).parameters)[1:]  # without self
            assert sig[: len(params)] == params, (name, method, sig)
        assert hasattr(cls, "__enter__") and hasattr(cls, "__exit__"), name

    class Missing:  # the check bites: no run_epoch
        name, world_size, rank = "x", 1, 0

        def steps_per_epoch(self) -> int:
            return 1

    assert not isinstance(Missing(), Engine)


def test_aggregation_uses_sums_not_mean_of_means(tmp_path: Path) -> None:
    steps = [
        StepStats(5.0, 8, 10, {"forward": 0.5, "total": 1.0}, {"local": 100, "net": 7}),
        StepStats(3.0, 0, 1, {"forward": 0.25, "total": 0.5}, {"local": 20}),
        StepStats(1.0, 4, 5, {"sample": 0.125}, {"h2d": 3}),
    ]
    ep = aggregate_steps(3, steps)
    assert ep.epoch == 3 and ep.num_steps == 3
    assert ep.loss == 9.0 / 16 and ep.train_acc == 12 / 16
    assert ep.loss != np.mean([0.5, 3.0, 0.2])  # not the mean of per-step means
    assert ep.times == {
        **dict.fromkeys(TIME_KEYS, 0.0),
        "forward": 0.75,
        "total": 1.5,
        "sample": 0.125,
    }
    assert ep.traffic == {**dict.fromkeys(LINK_KINDS, 0), "local": 120, "net": 7, "h2d": 3}
    assert math.isnan(aggregate_steps(0, [StepStats(0.0, 0, 0)]).loss)

    evals = [{"train_acc": 0.5, "val_acc": 0.5, "test_acc": 0.5, "val_loss": 1.0}] * 2
    eng = ScriptedEngine(steps, evals)
    _fit(eng, _cfg("train.epochs=2"), tmp_path)
    recs = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["epoch"] for r in recs] == [0, 1]
    for r in recs:
        assert r["loss"] == 9.0 / 16 and r["train_acc"] == 0.75 and r["num_steps"] == 3
        assert r["traffic"]["local"] == 120 and r["times"]["forward"] == 0.75
        assert r["engine"] == "scripted" and r["world_size"] == 1 and r["evaluated"] is True
        assert r["epoch_time_s"] >= 0 and set(r["memory"]) == set()


def _reference_early_stop(
    vals: Sequence[float], epochs: int, eval_every: int, patience: int | None
) -> tuple[int, int, list[int]]:
    """Naive model of the rules: returns (epochs run, best epoch, evaluated epochs)."""
    best, best_epoch, evaluated = -1.0, -1, []
    for e in range(epochs):
        if (e + 1) % eval_every and e != epochs - 1:
            continue
        evaluated.append(e)
        if vals[e] > best:
            best, best_epoch = vals[e], e
        if patience is not None and e - best_epoch >= patience:
            return e + 1, best_epoch, evaluated
    return epochs, best_epoch, evaluated


@pytest.mark.parametrize("case", range(12))
def test_early_stopping_and_best_epoch_match_reference(tmp_path: Path, case: int) -> None:
    rng = np.random.default_rng(case)
    epochs = int(rng.integers(3, 12))
    eval_every = int(rng.integers(1, 4))
    patience = None if case % 4 == 0 else int(rng.integers(1, 5))
    vals = np.round(rng.uniform(0.4, 0.8, epochs), 1).tolist()  # rounding creates ties
    evals = [
        {"train_acc": 0.9, "val_acc": v, "test_acc": 1.0 - e / 100, "val_loss": 1.0 - v}
        for e, v in enumerate(vals)
    ]
    eng = ScriptedEngine([StepStats(1.0, 1, 2)], evals)
    items = [f"train.epochs={epochs}", f"train.eval_every={eval_every}", "train.checkpoint_every=0"]
    if patience is not None:
        items.append(f"train.patience={patience}")
    summary = _fit(eng, _cfg(*items), tmp_path)

    run, best_epoch, evaluated = _reference_early_stop(vals, epochs, eval_every, patience)
    assert summary["epochs"] == run
    assert summary["stopped_early"] == (run < epochs)
    assert eng.evaluated == evaluated
    assert summary["best_epoch"] == best_epoch
    assert summary["val_acc"] == vals[best_epoch]
    assert summary["test_acc"] == 1.0 - best_epoch / 100
    recs = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["epoch"] for r in recs] == list(range(run))
    for r in recs:
        if r["epoch"] in evaluated:
            assert r["val_acc"] == vals[r["epoch"]] and r["evaluated"]
        else:
            assert r["val_acc"] is None and r["test_acc"] is None and not r["evaluated"]


def test_config_yaml_is_what_save_config_writes(tmp_path: Path) -> None:
    """One writer of config files: the run's ``config.yaml`` is ``save_config``'s text (as a run
    records it: a real dataset's run does not claim the synthetic generator's defaults)."""
    cfg = _cfg("train.epochs=1", "train.checkpoint_every=0", "data.dataset=data/cora")
    _fit(LogRegEngine(), cfg, tmp_path / "run")
    written = (tmp_path / "run" / "config.yaml").read_text()
    assert written == save_config(cfg, tmp_path / "again.yaml", recorded=True).read_text()
    assert "preset" not in written and load_config(tmp_path / "run" / "config.yaml") == cfg


def test_summary_files_and_table(tmp_path: Path) -> None:
    cfg = _cfg("train.epochs=3", "train.checkpoint_every=2", "model.name=gcn")
    console = Console(file=io.StringIO(), width=120)
    eng = LogRegEngine()
    summary = Trainer.from_config(eng, cfg, tmp_path, console=console, show_progress=True).fit()
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == summary
    for key in (
        "test_acc",
        "val_acc",
        "best_epoch",
        "final_train_loss",
        "epochs",
        "mean_epoch_time_s",
        "engine",
        "world_size",
        "model",
        "config",
    ):
        assert key in summary, key
    recs = read_metrics(tmp_path / "metrics.jsonl")
    assert len(recs) == 3
    best = max(recs, key=lambda r: (r["val_acc"], -r["epoch"]))  # first epoch with the max
    assert summary["best_epoch"] == best["epoch"]
    assert summary["val_acc"] == best["val_acc"] and summary["test_acc"] == best["test_acc"]
    assert summary["final_train_loss"] == recs[-1]["loss"]
    assert summary["mean_epoch_time_s"] == pytest.approx(
        np.mean([r["epoch_time_s"] for r in recs]), rel=1e-12
    )
    assert summary["epochs"] == 3 and summary["engine"] == "fake" and summary["world_size"] == 1
    assert summary["model"] == "gcn" and summary["config"] == cfg.to_dict()
    assert summary["total_steps"] == 3 * eng.steps_per_epoch()
    assert load_config(tmp_path / "config.yaml") == cfg
    # the model learned something (the fake task is learnable)
    assert recs[-1]["loss"] < recs[0]["loss"] and summary["test_acc"] > 0.5
    ck = CheckpointDir(tmp_path / "checkpoints").load_latest()
    assert ck is not None and ck["trainer"]["epoch"] == 3 and ck["trainer"]["next_step"] == 0
    out = console.file.getvalue()
    assert "run summary" in out and "test_acc" in out and "epoch   2" in out


def test_only_rank0_writes_files(tmp_path: Path) -> None:
    cfg = _cfg("train.epochs=2", "train.checkpoint_every=1")
    ref = _fit(LogRegEngine(), cfg, tmp_path / "r0")
    console = Console(file=io.StringIO(), width=120)
    eng = LogRegEngine(rank=1, world_size=2)
    s = Trainer.from_config(eng, cfg, tmp_path / "r1", console=console, show_progress=True).fit()
    assert not (tmp_path / "r1").exists() and console.file.getvalue() == ""
    assert s["val_acc"] == ref["val_acc"] and s["epochs"] == ref["epochs"]
    assert s["world_size"] == 2


_REFERENCE_RUNS: dict[tuple[Any, ...], tuple[dict, list[dict], dict]] = {}


def _run_uninterrupted(tmp_path: Path, cfg: Config, **kw: Any) -> tuple[dict, list[dict], dict]:
    """Final engine state, metrics and summary of an uninterrupted run (cached per setting)."""
    key = (repr(cfg.to_dict()), tuple(sorted(kw.items())))
    if key not in _REFERENCE_RUNS:
        eng = LogRegEngine(**kw)
        summary = _fit(eng, cfg, tmp_path / "ref")
        _REFERENCE_RUNS[key] = (
            _params(eng),
            read_metrics(tmp_path / "ref" / "metrics.jsonl"),
            summary,
        )
    return _REFERENCE_RUNS[key]


@pytest.mark.parametrize(
    ("checkpoint_every", "crash", "expected_resume"),
    [
        (0, "before", (1, 0)),  # epoch-end checkpoints only: epoch 1 is rerun from step 0
        (1, "before", (1, 3)),  # crash before step 3 of epoch 1: resume at step 3
        (3, "before", (1, 2)),  # global steps 3, 6 -> checkpoint after epoch 1 step 1
        (1, "after", (1, 3)),  # exception raised in the on_step path after step 2
        (2, "after", (1, 2)),
    ],
)
@pytest.mark.parametrize("global_rng", [False, True])
def test_mid_epoch_resume_is_bit_exact(
    tmp_path: Path,
    checkpoint_every: int,
    crash: str,
    expected_resume: tuple[int, int],
    global_rng: bool,
) -> None:
    cfg = _cfg("train.epochs=3", f"train.checkpoint_every={checkpoint_every}")
    # the reference checkpoints only at epoch ends: checkpointing must not change the trajectory
    ref_cfg = _cfg("train.epochs=3", "train.checkpoint_every=0")
    ref_params, ref_recs, ref_summary = _run_uninterrupted(tmp_path, ref_cfg, global_rng=global_rng)

    run_dir = tmp_path / "run"
    kw = {"crash_before": (1, 3)} if crash == "before" else {"crash_after": (1, 2)}
    with pytest.raises(KeyboardInterrupt):
        _fit(LogRegEngine(global_rng=global_rng, **kw), cfg, run_dir)
    assert [r["epoch"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0]

    torch.manual_seed(999)  # a fresh process would have a different global RNG state
    eng = LogRegEngine(global_rng=global_rng)  # fresh engine, fresh trainer
    summary = _fit(eng, cfg, run_dir, resume=True)
    assert eng.calls[0] == expected_resume and eng.calls[1:] == [(2, 0)]
    _assert_bitwise_equal(_params(eng), ref_params)
    recs = read_metrics(run_dir / "metrics.jsonl")
    assert [r["epoch"] for r in recs] == [0, 1, 2]
    for r, q in zip(recs, ref_recs, strict=True):
        assert {k: r[k] for k in _PER_EPOCH_KEYS} == {k: q[k] for k in _PER_EPOCH_KEYS}
    for k in ("test_acc", "val_acc", "best_epoch", "final_train_loss", "epochs", "total_steps"):
        assert summary[k] == ref_summary[k], k


def test_resume_without_restoring_rng_would_differ(tmp_path: Path) -> None:
    """Guards the test above: with global-RNG dropout, skipping restore_rng changes the result."""
    cfg = _cfg("train.epochs=2", "train.checkpoint_every=1")
    ref_params, _, _ = _run_uninterrupted(tmp_path, cfg, global_rng=True)
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _fit(LogRegEngine(global_rng=True, crash_before=(1, 1)), cfg, run_dir)
    torch.manual_seed(999)
    eng = LogRegEngine(global_rng=True)
    mp = pytest.MonkeyPatch()
    mp.setattr("fleetgnn.train.trainer.restore_rng", lambda state: None)
    try:
        _fit(eng, cfg, run_dir, resume=True)
    finally:
        mp.undo()
    assert not torch.equal(_params(eng)["p.weight"], ref_params["p.weight"])


def test_crash_during_epoch_end_save_rewrites_metrics_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg("train.epochs=3", "train.checkpoint_every=1")
    ref_params, ref_recs, _ = _run_uninterrupted(tmp_path, cfg)
    spe = LogRegEngine().steps_per_epoch()
    assert spe == 4
    real, calls = torch.save, []

    def flaky_save(obj: object, f: Any, *a: Any, **k: Any) -> None:
        calls.append(1)
        if len(calls) == 8:  # 3 mid-epoch + 1 epoch-end save per epoch: the end of epoch 1
            raise OSError("disk full")
        real(obj, f, *a, **k)

    monkeypatch.setattr(ckmod.torch, "save", flaky_save)
    run_dir = tmp_path / "run"
    with pytest.raises(OSError, match="disk full"):
        _fit(LogRegEngine(), cfg, run_dir)
    monkeypatch.undo()
    # epoch 1's line was written before its (failed) checkpoint; the last good one is mid-epoch
    assert [r["epoch"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1]
    ck = CheckpointDir(run_dir / "checkpoints").load_latest()
    assert ck is not None and (ck["trainer"]["epoch"], ck["trainer"]["next_step"]) == (1, 3)
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["best.pt", "last.pt", "prev.pt"]  # no temporary file left behind

    eng = LogRegEngine()
    _fit(eng, cfg, run_dir, resume=True)
    assert eng.calls == [(1, 3), (2, 0)]
    _assert_bitwise_equal(_params(eng), ref_params)
    recs = read_metrics(run_dir / "metrics.jsonl")
    assert [r["epoch"] for r in recs] == [0, 1, 2]
    assert [r["loss"] for r in recs] == [r["loss"] for r in ref_recs]


def test_resume_of_finished_run_runs_nothing(tmp_path: Path) -> None:
    cfg = _cfg("train.epochs=2")
    first = _fit(LogRegEngine(), cfg, tmp_path)
    eng = LogRegEngine()
    again = _fit(eng, cfg, tmp_path, resume=True)
    assert eng.calls == []
    for k in ("test_acc", "val_acc", "best_epoch", "final_train_loss", "epochs"):
        assert again[k] == first[k]
    # extending the run continues from epoch 2
    eng = LogRegEngine()
    longer = _fit(eng, _cfg("train.epochs=3"), tmp_path, resume=True)
    assert eng.calls == [(2, 0)] and longer["epochs"] == 3
    assert [r["epoch"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2]


def test_resume_without_checkpoint_starts_fresh(tmp_path: Path) -> None:
    eng = LogRegEngine()
    s = _fit(eng, _cfg("train.epochs=1"), tmp_path, resume=True)
    assert eng.calls == [(0, 0)] and s["epochs"] == 1


def test_resume_with_incompatible_config(tmp_path: Path) -> None:
    _fit(LogRegEngine(), _cfg("train.epochs=1"), tmp_path)
    with pytest.raises(
        ConfigError, match=r"model\.hidden: checkpoint None, now 64.*original config"
    ):
        _fit(LogRegEngine(), _cfg("train.epochs=2", "model.hidden=64"), tmp_path, resume=True)


def test_resume_mid_epoch_with_other_steps_per_epoch(tmp_path: Path) -> None:
    cfg = _cfg("train.epochs=2", "train.checkpoint_every=1")
    with pytest.raises(KeyboardInterrupt):
        _fit(LogRegEngine(crash_before=(0, 2)), cfg, tmp_path)
    with pytest.raises(ConfigError, match="cannot resume mid-epoch.*4 steps per epoch.*has 8"):
        _fit(LogRegEngine(batch=16), cfg, tmp_path, resume=True)


def test_fresh_run_replaces_old_state_only_when_told(tmp_path: Path) -> None:
    """As ``fleetgnn train`` without --resume or --overwrite, the API refuses a used directory."""
    _fit(LogRegEngine(), _cfg("train.epochs=2"), tmp_path)
    eng = LogRegEngine()
    with pytest.raises(ConfigError, match=r"already holds a run \(config.yaml, summary.json"):
        _fit(eng, _cfg("train.epochs=1"), tmp_path)
    assert eng.calls == [] and len(read_metrics(tmp_path / "metrics.jsonl")) == 2
    _fit(eng, _cfg("train.epochs=1"), tmp_path, overwrite=True)
    assert eng.calls == [(0, 0)]
    assert [r["epoch"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0]


def test_engine_skipping_steps_is_reported(tmp_path: Path) -> None:
    class Skipper(ScriptedEngine):
        def run_epoch(
            self, epoch: int, start_step: int = 0, on_step: StepCallback | None = None
        ) -> list[StepStats]:
            if on_step is not None:
                on_step(1, self.steps[1])
            return self.steps

    evals = [{"train_acc": 0, "val_acc": 0, "test_acc": 0, "val_loss": 0}]
    eng = Skipper([StepStats(1.0, 1, 1)] * 2, evals)
    with pytest.raises(RuntimeError, match="reported step 1 of epoch 0, expected 0"):
        _fit(eng, _cfg("train.epochs=1"), tmp_path)


def test_best_checkpoint_is_the_best_validation_epoch(tmp_path: Path) -> None:
    vals = [0.5, 0.7, 0.6, 0.7, 0.4]  # best at epoch 1 (a later tie does not replace it)
    evals = [
        {"train_acc": 0.9, "val_acc": v, "test_acc": 0.1 * e, "val_loss": 1.0}
        for e, v in enumerate(vals)
    ]
    eng = ScriptedEngine([StepStats(1.0, 1, 2)] * 3, evals)
    summary = _fit(eng, _cfg("train.epochs=3", "train.checkpoint_every=1"), tmp_path)
    best = ckmod.load_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert summary["best_epoch"] == 1 and summary["test_acc"] == pytest.approx(0.1)
    assert best["engine"] == {"epoch": 1}  # the engine's state right after epoch 1
    assert best["trainer"]["best_epoch"] == 1 and best["trainer"]["epoch"] == 2
    assert best["trainer"]["best"]["test_acc"] == summary["test_acc"]
    # resuming and extending: epoch 3 ties (not better), so best.pt stays epoch 1's
    eng = ScriptedEngine([StepStats(1.0, 1, 2)] * 3, evals)
    _fit(eng, _cfg("train.epochs=5", "train.checkpoint_every=1"), tmp_path, resume=True)
    assert ckmod.load_checkpoint(tmp_path / "checkpoints" / "best.pt")["engine"] == {"epoch": 1}
    # a fresh run in the same directory starts a new best.pt
    eng = ScriptedEngine([StepStats(1.0, 1, 2)], evals)
    _fit(eng, _cfg("train.epochs=1"), tmp_path, overwrite=True)
    assert ckmod.load_checkpoint(tmp_path / "checkpoints" / "best.pt")["engine"] == {"epoch": 0}


def test_quiet_trainer_prints_nothing(tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=120)
    trainer = Trainer.from_config(
        LogRegEngine(), _cfg("train.epochs=2"), tmp_path, console=console, quiet=True
    )
    summary = trainer.fit()
    assert console.file.getvalue() == ""
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def test_events_are_written_where_the_run_continues(tmp_path: Path) -> None:
    cfg = _cfg("train.epochs=3", "train.checkpoint_every=1")
    with pytest.raises(KeyboardInterrupt):
        _fit(LogRegEngine(crash_before=(1, 2)), cfg, tmp_path)
    trainer = Trainer.from_config(LogRegEngine(), cfg, tmp_path, console=_quiet(), quiet=True)
    trainer.log_event("restart", attempt=1, failed_ranks=[1])  # queued until fit opens the file
    trainer.fit(resume=True)
    recs = read_metrics(tmp_path / "metrics.jsonl", events=True)
    assert [r.get("epoch", r.get("event")) for r in recs] == [0, "restart", 1, 2]
    event = recs[1]
    assert (event["attempt"], event["failed_ranks"]) == (1, [1])
    assert (event["at_epoch"], event["at_step"]) == (1, 2) and event["time"] > 0
    assert [r["epoch"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    # other ranks record nothing
    other = Trainer.from_config(LogRegEngine(rank=1, world_size=2), cfg, tmp_path / "r1")
    other.log_event("restart", attempt=1)
    assert other._pending_events == []


def test_resume_point(tmp_path: Path) -> None:
    from fleetgnn.train import resume_point

    assert resume_point(tmp_path) is None
    cfg = _cfg("train.epochs=3", "train.checkpoint_every=1")
    with pytest.raises(KeyboardInterrupt):
        _fit(LogRegEngine(crash_before=(1, 3)), cfg, tmp_path)
    assert resume_point(tmp_path) == (1, 3)


def test_cuda_device_without_cuda_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetgnn.engines.common import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"train\.device='cuda:1' but CUDA is not available"):
        resolve_device("cuda:1", key="train.device")
    with pytest.raises(ConfigError, match=r"device='tpu' is not"):
        resolve_device("tpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_max_steps_stops_mid_epoch_and_resume_continues_bit_exact(tmp_path: Path) -> None:
    """``train.max_steps`` counts steps over the run, resumed runs included."""
    ref_params, ref_recs, _ = _run_uninterrupted(tmp_path, _cfg("train.epochs=3"))
    spe = LogRegEngine().steps_per_epoch()
    assert spe == 4
    run_dir = tmp_path / "run"
    cfg = _cfg("train.epochs=3", "train.max_steps=6", "train.checkpoint_every=3")
    eng = LogRegEngine()
    summary = _fit(eng, cfg, run_dir)
    assert eng.calls == [(0, 0), (1, 0)]
    assert summary["total_steps"] == 6 and summary["stopped"] == "max_steps"
    assert summary["epochs"] == 1 and summary["partial_epoch_steps"] == 2
    assert summary["test_acc"] is not None and summary["final_train_loss"] is not None
    recs = read_metrics(run_dir / "metrics.jsonl")
    assert [(r["epoch"], r["num_steps"], r["evaluated"]) for r in recs] == [
        (0, 4, True),
        (1, 2, True),  # the partial epoch, evaluated once at the end
    ]
    assert recs[1]["partial"] is True and recs[0].get("partial") is None
    assert recs[0]["loss"] == ref_recs[0]["loss"]
    ck = CheckpointDir(run_dir / "checkpoints").load_latest()
    assert ck is not None
    assert (ck["trainer"]["epoch"], ck["trainer"]["next_step"], ck["trainer"]["global_step"]) == (
        1,
        2,
        6,
    )
    # resuming with the same limit runs nothing more
    eng = LogRegEngine()
    again = _fit(eng, cfg, run_dir, resume=True)
    assert eng.calls == [] and again["total_steps"] == 6 and again["stopped"] == "max_steps"
    # a larger limit counts the 6 steps already taken: 4 more, to the end of epoch 2
    eng = LogRegEngine()
    more = _fit(eng, _cfg("train.epochs=3", "train.max_steps=10"), run_dir, resume=True)
    assert eng.calls == [(1, 2), (2, 0)]
    assert more["total_steps"] == 10 and more["stopped"] == "max_steps"
    assert more["epochs"] == 2 and more["partial_epoch_steps"] == 2
    # no limit: the run ends where the uninterrupted one does, bit for bit
    eng = LogRegEngine()
    last = _fit(eng, _cfg("train.epochs=3"), run_dir, resume=True)
    assert eng.calls == [(2, 2)]
    assert last["total_steps"] == 12 and last["stopped"] == "epochs" and last["epochs"] == 3
    _assert_bitwise_equal(_params(eng), ref_params)
    recs = read_metrics(run_dir / "metrics.jsonl")
    assert [(r["epoch"], r["num_steps"]) for r in recs] == [(0, 4), (1, 4), (2, 4)]
    assert [r["loss"] for r in recs] == [r["loss"] for r in ref_recs]


def test_max_steps_at_an_epoch_end_evaluates_that_epoch(tmp_path: Path) -> None:
    eng = LogRegEngine()
    cfg = _cfg("train.epochs=5", "train.eval_every=3", "train.max_steps=8")
    summary = _fit(eng, cfg, tmp_path)
    assert eng.calls == [(0, 0), (1, 0)]
    assert summary["total_steps"] == 8 and summary["stopped"] == "max_steps"
    assert summary["epochs"] == 2 and summary["partial_epoch_steps"] == 0
    recs = read_metrics(tmp_path / "metrics.jsonl")
    # eval_every=3 skips epoch 1, but it is the run's last: evaluated once at the end
    assert [(r["epoch"], r["evaluated"]) for r in recs] == [(0, False), (1, True)]
    assert summary["best_epoch"] == 1


def test_max_steps_must_be_positive() -> None:
    from fleetgnn.config import TrainerConfig

    assert TrainerConfig().max_steps is None and _cfg().train.max_steps is None
    assert _cfg("train.max_steps=5").trainer_config().max_steps == 5
    with pytest.raises(ConfigError, match=r"max_steps"):
        TrainerConfig(max_steps=0)
    with pytest.raises(ConfigError, match=r"train\.max_steps=0.*>= 1"):
        _cfg("train.max_steps=0")


def test_epoch_record_is_written_before_evaluation(tmp_path: Path) -> None:
    """An evaluation that dies leaves the epoch's training numbers in metrics.jsonl."""

    class DyingEval(LogRegEngine):
        def evaluate(self) -> dict[str, float]:
            raise MemoryError("evaluation ran out of memory")

    cfg = _cfg("train.epochs=2", "train.checkpoint_every=0")
    ref_params, ref_recs, _ = _run_uninterrupted(tmp_path, cfg)
    run_dir = tmp_path / "run"
    with pytest.raises(MemoryError):
        _fit(DyingEval(), cfg, run_dir)
    recs = read_metrics(run_dir / "metrics.jsonl")
    assert len(recs) == 1
    rec = recs[0]
    assert rec["epoch"] == 0 and rec["evaluated"] is False and rec["val_acc"] is None
    assert rec["num_steps"] == 4 and rec["loss"] == ref_recs[0]["loss"]
    assert rec["train_acc"] == ref_recs[0]["train_acc"] and rec["epoch_time_s"] > 0
    # the evaluated record replaces it in place: still one line per epoch
    eng = LogRegEngine()
    _fit(eng, cfg, run_dir, resume=True)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [0, 1]
    recs = read_metrics(run_dir / "metrics.jsonl")
    for r, q in zip(recs, ref_recs, strict=True):
        assert {k: r[k] for k in _PER_EPOCH_KEYS} == {k: q[k] for k in _PER_EPOCH_KEYS}
    assert all(r["evaluated"] for r in recs)
