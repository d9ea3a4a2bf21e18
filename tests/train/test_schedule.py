"""Learning-rate schedules, gradient clipping and callbacks: settings, steps, exact resumption."""

from pathlib import Path
from typing import Any

import pytest
import torch

from fleetgnn.config import load_config
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.engines.base import StepStats
from fleetgnn.engines.marks import HostMarks
from fleetgnn.engines.step import StepLoss, train_step
from fleetgnn.errors import ConfigError
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import Callback, Trainer, engine_from_config, read_metrics
from fleetgnn.train.callbacks import load_callbacks
from fleetgnn.train.checkpoint import load_checkpoint
from fleetgnn.train.hooks import check_trainer_settings
from fleetgnn.train.schedule import build_scheduler, scheduler_names


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sched")
    return write_dataset(generate_graph(spec_for("tiny", 0.3), seed=1), root / "d")


def _check(*items: str) -> None:
    check_trainer_settings(load_config(overrides=list(items)))


# ------------------------------------------------------------------ settings


def test_every_torch_scheduler_is_accepted_by_name() -> None:
    names = scheduler_names()
    for name in ("StepLR", "CosineAnnealingLR", "OneCycleLR", "ReduceLROnPlateau", "LinearLR"):
        assert name in names
    assert "LRScheduler" not in names


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            ["train.lr_scheduler=StepLr", "train.lr_scheduler_args={step_size: 2}"],
            r"^train\.lr_scheduler='StepLr' is not a torch\.optim\.lr_scheduler class; did you "
            r"mean train\.lr_scheduler=StepLR\?$",
        ),
        (
            ["train.lr_scheduler=StepLR", "train.lr_scheduler_args={step_size: 2, gama: 0.5}"],
            r"^train\.lr_scheduler_args=\{.*\} do not fit StepLR: got an unexpected keyword "
            r"argument 'gama'; its arguments: step_size, gamma",
        ),
        (
            ["train.lr_scheduler=StepLR"],
            r"^train\.lr_scheduler_args=\{\} do not fit StepLR: missing a required argument: "
            r"'step_size'",
        ),
        (
            ["train.lr_scheduler=OneCycleLR", "train.lr_scheduler_args={max_lr: 0.1}"],
            r"^train\.lr_scheduler_args=.* do not fit OneCycleLR: .*total_steps",
        ),
        (
            ["train.lr_scheduler_args={step_size: 2}"],
            r"^train\.lr_scheduler_args=.* is set but train\.lr_scheduler is null",
        ),
        (
            ["train.lr_scheduler=ReduceLROnPlateau", "train.lr_scheduler_interval=step"],
            r"^train\.lr_scheduler=ReduceLROnPlateau .*train\.lr_scheduler_interval=epoch$",
        ),
    ],
)
def test_bad_schedule_is_one_line_naming_the_key(items: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        _check(*items)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("train.clip_grad_norm=0", r"^train\.clip_grad_norm=0\.0 is invalid: must be a number > 0"),
        ("train.clip_grad_norm=-1", r"^train\.clip_grad_norm=-1\.0 is invalid"),
        ("train.lr_scheduler_interval=epochs", r"Did you mean train\.lr_scheduler_interval=epoch"),
        ("train.lr_scheduler_args=[1, 2]", r"^train\.lr_scheduler_args=\[1, 2\] has type list"),
    ],
)
def test_bad_clip_and_interval_values(item: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[item])


def test_callbacks_from_config_are_loaded_and_bad_ones_refused() -> None:
    (cb,) = load_callbacks([f"{__name__}:Recorder"])
    assert isinstance(cb, Recorder)
    with pytest.raises(ConfigError, match=r"^train\.callbacks: 'no_such_mod:X': cannot import"):
        load_callbacks(["no_such_mod:X"])
    with pytest.raises(ConfigError, match=r"'Nope' in module .* is not found, expected a sub"):
        load_callbacks([f"{__name__}:Nope"])
    with pytest.raises(ConfigError, match=r"'SCHEDULES' in module .* is a dict, expected"):
        load_callbacks([f"{__name__}.SCHEDULES"])


# ------------------------------------------------------------------ clipping in the step


def test_clipping_bounds_the_synchronised_gradient_norm() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3, dtype=torch.float64)
    x, y = torch.randn(40, 5, dtype=torch.float64), torch.randint(0, 3, (40,))

    def run(clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        m = torch.nn.Linear(5, 3, dtype=torch.float64)
        m.load_state_dict(model.state_dict())
        opt = torch.optim.SGD(m.parameters(), lr=1.0)

        def forward() -> StepLoss:
            ce = torch.nn.CrossEntropyLoss(reduction="none")
            return StepLoss.of(ce, m(x) * 50, y, 40)

        seen = []
        real = opt.step

        def step() -> None:  # what the optimizer is handed
            seen.append(torch.cat([p.grad.view(-1) for p in m.parameters()]))
            real()

        opt.step = step
        train_step(m, opt, HostMarks(), forward, clip_grad_norm=clip).resolve()
        return seen[0], m.weight.detach()

    raw, w_raw = run(None)
    clipped, w_clip = run(0.25)
    assert float(raw.norm()) > 1.0
    assert float(clipped.norm()) == pytest.approx(0.25, rel=1e-6)  # torch adds eps 1e-6
    assert torch.allclose(clipped, raw * (0.25 / raw.norm()), rtol=1e-6, atol=1e-9)
    assert not torch.equal(w_raw, w_clip)


# ------------------------------------------------------------------ callbacks and resumption


class Recorder(Callback):
    """Records the hooks' calls and keeps a counter as its checkpointed state."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.steps = 0

    def on_fit_start(self, trainer: Trainer) -> None:
        self.calls.append(("start", trainer.resumed))

    def on_step_end(self, trainer: Trainer, epoch: int, step: int, stats: StepStats) -> None:
        self.steps += 1
        self.calls.append(("step", epoch, step))

    def on_epoch_end(self, trainer: Trainer, record: Any) -> None:
        self.calls.append(("epoch", record["epoch"], bool(record.get("partial"))))

    def on_fit_end(self, trainer: Trainer, summary: Any) -> None:
        self.calls.append(("end", summary is not None))

    def state_dict(self) -> Any:
        return {"steps": self.steps}

    def load_state_dict(self, state: Any) -> None:
        self.steps = int(state["steps"])


SCHEDULES = {
    "step": ["train.lr_scheduler=StepLR", "train.lr_scheduler_args={step_size: 3, gamma: 0.5}"],
    "epoch": [
        "train.lr_scheduler=CosineAnnealingLR",
        "train.lr_scheduler_args={T_max: 4, eta_min: 0.001}",
    ],
}


def _cfg(engine: str, interval: str, max_steps: int, extra: tuple[str, ...] = ()) -> Any:
    return load_config(
        overrides=[
            f"train.engine={engine}",
            "train.epochs=3",
            "train.batch_size=16",
            "train.fanouts=3,3",
            "train.dtype=float64",
            "train.device=cpu",
            "model.hidden=8",
            "optim.lr=0.05",
            "train.clip_grad_norm=0.05",  # below the gradients' norm: clipping acts
            "train.checkpoint_interval=0",
            f"train.max_steps={max_steps}",
            f"train.lr_scheduler_interval={interval}",
            *SCHEDULES[interval],
            *extra,
        ]
    )


def _outcome(run_dir: Path) -> tuple[dict[str, torch.Tensor], list[float], float, Any]:
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    losses = [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if not r.get("partial")]
    lr = ckpt["engine"]["optimizer"]["param_groups"][0]["lr"]
    return ckpt["engine"]["model"], losses, lr, ckpt["callbacks"]


def _fit(cfg: Any, graph: Any, run_dir: Path, resume: bool, ctx: Any = None, **kw: Any) -> None:
    with engine_from_config(cfg, graph, ctx) as eng:
        Trainer.from_config(eng, cfg, run_dir, quiet=True, **kw).fit(resume, overwrite=not resume)


def _same(a: Any, b: Any) -> None:
    (pa, la, lra, ca), (pb, lb, lrb, cb) = a, b
    assert la == lb and lra == lrb
    for name, value in pa.items():
        assert torch.equal(value, pb[name]), name
    assert ca["lr_scheduler"]["last_epoch"] == cb["lr_scheduler"]["last_epoch"]


@pytest.mark.parametrize("interval", ["step", "epoch"])
def test_schedule_and_clipping_resume_exactly_reference(
    data: Path, tmp_path: Path, interval: str
) -> None:
    """An uninterrupted run == a run stopped mid-epoch (train.max_steps) and resumed."""
    graph = open_dataset(data)
    spe = -(-int(graph.train_mask.sum()) // 16)
    total, stop = 3 * spe, spe + spe // 2  # stopped inside epoch 1
    rec_whole, rec_a, rec_b = Recorder(), Recorder(), Recorder()
    _fit(_cfg("reference", interval, total), graph, tmp_path / "w", False, callbacks=[rec_whole])
    _fit(_cfg("reference", interval, stop), graph, tmp_path / "r", False, callbacks=[rec_a])
    _fit(_cfg("reference", interval, total), graph, tmp_path / "r", True, callbacks=[rec_b])
    whole, resumed = _outcome(tmp_path / "w"), _outcome(tmp_path / "r")
    _same(whole, resumed)
    assert whole[2] < 0.05  # the schedule lowered the learning rate
    # the callbacks' hooks and checkpointed state
    assert rec_b.steps == rec_whole.steps == total and rec_a.steps == stop
    assert rec_whole.calls[0] == ("start", False) and rec_b.calls[0] == ("start", True)
    assert rec_whole.calls[-1] == ("end", True)
    assert ("epoch", 1, True) in rec_a.calls and ("epoch", 1, False) in rec_b.calls
    assert resumed[3][f"{__name__}.Recorder"] == {"steps": total}
    # without clipping the same run differs: the clip acted
    unclipped_cfg = _cfg("reference", interval, total, ("train.clip_grad_norm=null",))
    _fit(unclipped_cfg, graph, tmp_path / "n", False)
    unclipped = _outcome(tmp_path / "n")[0]
    assert any(not torch.equal(v, unclipped[k]) for k, v in whole[0].items())


def test_resume_refuses_another_schedule(data: Path, tmp_path: Path) -> None:
    graph = open_dataset(data)
    _fit(_cfg("reference", "step", 2), graph, tmp_path, False)
    other = _cfg("reference", "step", 4, ("train.lr_scheduler_args={step_size: 5}",))
    with pytest.raises(ConfigError, match=r"train\.lr_scheduler_args: checkpoint"):
        _fit(other, graph, tmp_path, True)


def test_plateau_steps_on_validation_loss(data: Path, tmp_path: Path) -> None:
    graph = open_dataset(data)
    cfg = load_config(
        overrides=[
            "train.epochs=3",
            "train.batch_size=64",
            "train.device=cpu",
            "train.lr_scheduler=ReduceLROnPlateau",
            "train.lr_scheduler_args={patience: 0, threshold: 10.0, factor: 0.5}",
        ]
    )
    with engine_from_config(cfg, graph) as eng:
        Trainer.from_config(eng, cfg, tmp_path, quiet=True).fit()
        # no epoch improves val_loss by 1000%: the rate halves after every epoch but the first
        assert eng.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.5**3)


def test_scheduler_over_the_python_api_optimizer() -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = build_scheduler(_cfg("reference", "step", 1).trainer_config(), opt)
    assert isinstance(sched, torch.optim.lr_scheduler.StepLR) and sched.step_size == 3


def _world_resume(comm: Any, data: str, root: str) -> Any:
    """minibatch at W = 2: uninterrupted vs stopped mid-epoch and resumed; and fullgraph with a
    clip that binds against the reference (the clip uses the global norm)."""
    torch.set_num_threads(1)
    graph = open_dataset(data)
    ctx = context_of(comm)
    spe = None
    with engine_from_config(_cfg("minibatch", "step", 1, ("train.nproc=2",)), graph, ctx) as e:
        spe = e.steps_per_epoch()
    total, stop = 3 * spe, spe + max(1, spe // 2)

    def fit(run: str, steps: int, resume: bool) -> None:
        cfg = _cfg("minibatch", "step", steps, ("train.nproc=2",))
        _fit(cfg, graph, Path(root) / run, resume, ctx)
        comm.barrier()

    fit("whole", total, False)
    fit("restarted", stop, False)
    fit("restarted", total, True)
    # fullgraph, clipped, one step
    full = [
        "train.mode=full",
        "train.clip_grad_norm=0.01",
        "train.lr_scheduler=null",
        "train.lr_scheduler_args={}",
        "train.epochs=2",
    ]
    cfg = _cfg("fullgraph", "step", 10, ("train.nproc=2", *full))
    with engine_from_config(cfg, graph, ctx, num_chunks=2, depth=1, tune=False) as eng:
        for epoch in range(2):
            eng.run_epoch(epoch)
        params = {n: p.detach().clone() for n, p in eng.module.named_parameters()}
    if comm.rank != 0:
        return None
    return {
        "whole": _outcome(Path(root) / "whole"),
        "restarted": _outcome(Path(root) / "restarted"),
        "fullgraph": params,
        "spe": spe,
    }


@pytest.mark.slow
def test_schedule_and_clipping_resume_exactly_at_world_size_2(data: Path, tmp_path: Path) -> None:
    out = run_world(_world_resume, 2, str(data), str(tmp_path), timeout_s=240)[0]
    assert out["spe"] > 1
    _same(out["whole"], out["restarted"])
    # the fullgraph engine at W = 2 clips to the same update as the single-process reference
    full = [
        "train.mode=full",
        "train.clip_grad_norm=0.01",
        "train.lr_scheduler=null",
        "train.lr_scheduler_args={}",
    ]
    cfg = _cfg("reference", "step", 10, tuple(full))
    with engine_from_config(cfg, open_dataset(data)) as ref:
        for epoch in range(2):
            ref.run_epoch(epoch)
        for name, p in ref.module.named_parameters():
            assert torch.allclose(out["fullgraph"][name], p.detach(), rtol=1e-6, atol=1e-9), name
