"""The training loop: epochs, evaluation, early stopping, checkpoint/resume, metrics, progress.

:class:`Trainer` drives any :class:`~fleetgnn.engines.base.Engine`. Per epoch it runs
``engine.run_epoch`` and aggregates the steps' :class:`~fleetgnn.engines.base.StepStats` into an
:class:`~fleetgnn.engines.base.EpochStats` from numerators and denominators
(``loss = sum(loss_sum) / sum(count)``, ``train_acc = sum(correct) / sum(count)``), records the
epoch in ``metrics.jsonl`` before evaluating it, evaluates every ``train.eval_every`` epochs and
after the last one, tracks the best-validation epoch, stops early after ``train.patience`` epochs
without a strict ``val_acc`` improvement, and writes::

    RUN_DIR/config.yaml          the run's config
    RUN_DIR/metrics.jsonl        one line per epoch, and event lines (see fleetgnn.train.metrics)
    RUN_DIR/checkpoints/         last.pt + prev.pt, and best.pt: the state at the end of the
                                 best-validation epoch (see fleetgnn.train.checkpoint)
    RUN_DIR/summary.json         test/val accuracy at the best-validation epoch, timings, config,
                                 why the run stopped ("stopped": epochs, patience or max_steps)

Checkpoints are taken every ``train.checkpoint_every`` optimisation steps (counted over the run,
from the engine's ``on_step`` callback; an epoch end past such a step saves it), at the first epoch
end ``train.checkpoint_interval`` seconds after the last save (``0``: every epoch end), at the
run's end, and on an interrupt (``KeyboardInterrupt``: Ctrl-C, or SIGTERM under ``fleetgnn
train``). An epoch end that is not due costs no disk write: the checkpoint is kept in memory (the
engine state copied) and written only if an interrupt comes before the next save; the
best-validation epoch's one is kept the same way and written as ``best.pt`` at the next save. A
crash other than an interrupt loses the steps since the last save (``checkpoint_every`` steps or
the epochs of ``checkpoint_interval`` seconds, whichever is less), which a resume runs again to
the same result. A checkpoint holds
``engine.state_dict()``, the epoch and next step, the partial epoch's summed step stats, the
best-so-far metrics, the early-stopping counter, the epoch times, the RNG states and the config;
``fit(resume=True)`` restores it and calls ``engine.run_epoch(epoch, start_step=k)``, which
reproduces the uninterrupted run exactly because engines key every random draw by
``(seed, epoch, step)``.

``train.max_steps``: the run stops once it has taken that many optimisation steps in all (the
steps of the runs it resumes count). A limit that falls inside an epoch ends ``run_epoch`` early:
``on_step`` raises a private exception after the last step (on every rank at the same step, since
every rank counts the same steps), the Trainer waits for the batch an engine's prefetch thread
may still be preparing (``engine.drain()``, where the engine has it), then records the partial
epoch (``"partial": true``; its engine-specific ``extra`` numbers, computed at epoch ends, are left
out), evaluates once and checkpoints mid-epoch, so ``--resume`` with a larger limit continues
exactly there. A limit at an epoch end makes that epoch the last, evaluated one.

Multi-rank runs: every rank executes the same control flow (the same steps, and the same
early-stopping decisions because ``engine.evaluate()`` is already aggregated over ranks); every rank
calls ``engine.state_dict()`` at checkpoints (it may communicate), and only rank 0 writes files and
prints. Whether ``checkpoint_interval`` has passed is rank 0's clock, broadcast at the epoch ends
no other rule decides. RNG states are captured on rank 0 and restored on every rank.

Optional engine methods (beyond the :class:`~fleetgnn.engines.base.Engine` protocol), called at
each epoch end when present: ``peak_memory() -> Mapping[str, int]`` (peak bytes per memory tier,
the ``memory`` field of the metrics) and ``epoch_extra() -> Mapping[str, Any]`` (engine-specific
numbers, the ``extra`` field) and, in multi-rank runs, ``rank_extra() -> Mapping[str, Any]``
(small per-rank numbers, gathered from every rank into ``extra["per_rank"]``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from fleetgnn.config import Config, EngineConfig, TrainerConfig
from fleetgnn.config.run import save_config
from fleetgnn.durable import atomic_write_text
from fleetgnn.engines.base import Engine, EngineBase, EpochStats, StepStats
from fleetgnn.engines.common import peak_device_memory
from fleetgnn.errors import ConfigError, NonFiniteLossError
from fleetgnn.tasks import task_of
from fleetgnn.train.callbacks import Callback, callback_states, load_callback_states
from fleetgnn.train.checkpoint import (
    CheckpointDir,
    CheckpointError,
    capture_rng,
    detached_copy,
    first_non_finite,
    restore_rng,
)
from fleetgnn.train.hooks import trainer_callbacks
from fleetgnn.train.metrics import MetricsWriter, to_json
from fleetgnn.train.results import metric_keys, summary_note
from fleetgnn.train.resume import (
    CHECKPOINT_FORMAT,
    CONTENT_ERRORS,
    TrainState,
    apply_optim_changes,
    checked_state,
    engine_config_dict,
)
from fleetgnn.train.rundir import acquire_run_dir, release_run_dir, run_markers
from fleetgnn.train.sums import StepSums
from fleetgnn.types import PathLikeStr

#: The clock of the checkpoint interval (a module attribute, so tests can drive it).
_clock = time.monotonic


class _MaxStepsReached(BaseException):  # noqa: N818 - a signal, not an error
    """Raised from ``on_step`` to leave ``run_epoch`` after the run's last step (``max_steps``).

    A :class:`BaseException` (like :class:`KeyboardInterrupt`) so that no engine's
    ``except Exception`` handler mistakes it for a failure.
    """


class Trainer:
    """Runs an engine for ``config.epochs`` epochs with evaluation and checkpoints.

    Args:
        engine: The training strategy (owns model, optimizer and data pipeline).
        config: The Trainer's own settings (epochs, evaluation cadence, early stopping,
            checkpoint cadence, seed, run directory).
        run_dir: Output directory (created by rank 0; default ``config.run_dir``).
        run_config: The whole run's config when there is one (``fleetgnn train``): written to
            ``config.yaml`` and compared with a checkpoint's on resume. Without it
            ``config.yaml`` holds the Trainer's and the engine's configs.
        console: Where progress, epoch lines and the summary table go (default: stdout).
        show_progress: Show a progress bar over the steps of each epoch (rank 0 only); the
            one-line-per-epoch log and the final table are printed either way.
        quiet: Print nothing: no progress bar, no epoch lines, no summary table (the files are
            written as usual; errors are raised as usual).
        lock_run_dir: Hold the run directory's lock (:mod:`fleetgnn.train.rundir`) while
            :meth:`fit` runs (rank 0). ``False`` when the caller holds it in another process
            (``fleetgnn train --nproc N`` holds it in the launching process).
        callbacks: The user's :class:`~fleetgnn.train.Callback` objects, called on every rank
            after the built-in ones (the learning-rate schedule, TensorBoard, and those of
            ``train.callbacks``); see :mod:`fleetgnn.train.callbacks`.

    Raises:
        ConfigError: If no run directory is given, or a schedule, TensorBoard or callback
            setting is bad.

    Example::

        engine = build_engine(model, graph, MinibatchEngineConfig(fanouts=(10, 10)))
        with engine:
            summary = Trainer(engine, TrainerConfig(epochs=5), "runs/x").fit(resume=True)
    """

    def __init__(
        self,
        engine: Engine,
        config: TrainerConfig | None = None,
        run_dir: PathLikeStr | None = None,
        *,
        run_config: Config | None = None,
        console: Console | None = None,
        show_progress: bool = True,
        quiet: bool = False,
        lock_run_dir: bool = True,
        callbacks: Sequence[Callback] = (),
    ) -> None:
        config = config if config is not None else TrainerConfig()
        if not isinstance(config, TrainerConfig):
            raise ConfigError(
                f"Trainer's 'config' must be a TrainerConfig (got {type(config).__name__}); "
                f"use Trainer.from_config(engine, run_config, run_dir) for a whole run config"
            )
        run_dir = run_dir if run_dir is not None else config.run_dir
        if run_dir is None:
            raise ConfigError("Trainer needs a run directory: pass run_dir or config.run_dir")
        self.engine = _checked(engine)
        self.config = config
        self.run_config = run_config
        self.run_dir = Path(run_dir)
        self.console = console if console is not None else Console()
        self.quiet = bool(quiet)
        self.show_progress = show_progress and not self.quiet
        self.lock_run_dir = bool(lock_run_dir)
        self.checkpoints = CheckpointDir(self.run_dir / "checkpoints")
        self.state = TrainState()
        #: Where the run is (``"training (epoch 3, step 41)"``, ``"evaluation after epoch 3"``):
        #: what a device out-of-memory error names (:mod:`fleetgnn.train.oom`).
        self.phase = "setup"
        self._pending_events: list[dict[str, Any]] = []
        self._writer: MetricsWriter | None = None
        # checkpoint cadence: when and at which step the last save was; the latest epoch-end
        # checkpoint not yet written (written on an interrupt) and the best epoch's (rank 0)
        self._saved_at = _clock()
        self._saved_step = 0
        self._finite_at: int | None = None  # the global step whose state was last found finite
        self._snapshot: dict[str, Any] | None = None
        self._best_snapshot: dict[str, Any] | None = None
        self._config_cache: dict[str, Any] | None = None
        #: Whether the current :meth:`fit` continued a checkpoint (for callbacks).
        self.resumed = False
        self.callbacks = trainer_callbacks(config, engine, callbacks)

    @classmethod
    def from_config(
        cls, engine: Engine, config: Config, run_dir: PathLikeStr | None = None, **kwargs: Any
    ) -> Trainer:
        """A Trainer for a whole run config (what ``fleetgnn train`` uses).

        A ``data.feature_norm`` left ``None`` (the dataset's transform) is recorded as the value
        the engine applies (its config's ``feature_norm``), so ``config.yaml`` says what was used.
        """
        config = config.validate()
        cfg = _checked(engine).config  # a user engine's may be None or of its own
        used = cfg.feature_norm if isinstance(cfg, EngineConfig) else None
        if config.data.feature_norm is None and isinstance(used, str):
            data = dataclasses.replace(config.data, feature_norm=used)
            config = dataclasses.replace(config, data=data)
        return cls(
            engine,
            config.trainer_config(),
            run_dir if run_dir is not None else config.run_dir,
            run_config=config,
            **kwargs,
        )

    def __repr__(self) -> str:
        return (
            f"Trainer(engine={self.engine.name!r}, rank={self.engine.rank}/"
            f"{self.engine.world_size}, run_dir={str(self.run_dir)!r})"
        )

    @property
    def is_main(self) -> bool:
        """Whether this process writes files and prints (rank 0)."""
        return int(self.engine.rank) == 0

    @property
    def metrics_path(self) -> Path:
        """``RUN_DIR/metrics.jsonl``."""
        return self.run_dir / "metrics.jsonl"

    @property
    def summary_path(self) -> Path:
        """``RUN_DIR/summary.json``."""
        return self.run_dir / "summary.json"

    # ---------------------------------------------------------------------------------------
    # public API

    def log_event(self, event: str, **fields: Any) -> None:
        """Record an event line in ``metrics.jsonl`` (rank 0; other ranks ignore it).

        During :meth:`fit` the line is written at once; before it, when :meth:`fit` has opened
        the file (after restoring a checkpoint, so the line survives the resume rule). The line
        is ``{"event": event, **fields, "at_epoch": E, "at_step": S, "time": unix seconds}``
        with ``(E, S)`` the epoch and step the run is at (continues from) when it is written.

        Args:
            event: What happened, e.g. ``"restart"``.
            **fields: JSON-serialisable details.
        """
        if not self.is_main:
            return
        self._pending_events.append({"event": str(event), **fields, "time": time.time()})
        if self._writer is not None:
            self._flush_events(self._writer)

    def _flush_events(self, writer: MetricsWriter) -> None:
        for record in self._pending_events:
            at = {"at_epoch": self.state.epoch, "at_step": self.state.next_step}
            writer.write({**record, **at})
        self._pending_events.clear()

    def fit(self, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
        """Train until ``train.epochs``, early stopping or ``train.max_steps``; returns the summary.

        Rank 0 holds the run directory's lock while it runs (see ``lock_run_dir``), so a second
        run on the same directory is refused, in one line naming this process.

        Args:
            resume: Continue from the latest checkpoint in ``RUN_DIR/checkpoints`` (mid-epoch if
                it was taken mid-epoch). Without a checkpoint the run starts fresh. A fresh run
                (``resume=False``) seeds Python, NumPy and torch with ``train.seed``.
            overwrite: Let a fresh run replace the run that ``RUN_DIR`` holds (its checkpoints,
                metrics and summary); without it (and without ``resume``) such a directory is
                refused, as ``fleetgnn train`` refuses it without ``--overwrite``.

        Returns:
            The summary also written to ``RUN_DIR/summary.json``.

        Raises:
            ConfigError: Invalid config, a config incompatible with the checkpoint, a run
                directory that holds a run (neither ``resume`` nor ``overwrite``), or one another
                run is using (the same on every rank).
            CheckpointError: Checkpoints exist but none can be loaded.
        """
        locked = self._claim_run_dir(resume, overwrite)
        summary = None
        try:
            summary = self._fit(resume)
            return summary
        finally:
            for cb in self.callbacks:
                cb.on_fit_end(self, summary)
            if locked:
                release_run_dir(self.run_dir)

    def _claim_run_dir(self, resume: bool, overwrite: bool) -> bool:
        """Rank 0 locks the run directory and checks it is free; every rank gets the verdict.

        Returns:
            Whether this process took the lock (and must release it).
        """
        problem, locked = None, False
        if self.is_main:
            try:
                if self.lock_run_dir:
                    acquire_run_dir(self.run_dir)
                    locked = True
                found = run_markers(self.run_dir)
                if found and not (resume or overwrite):
                    problem = (
                        f"run directory '{self.run_dir}' already holds a run ({', '.join(found)}); "
                        f"continue it with fit(resume=True), replace it with fit(overwrite=True), "
                        f"or pick another run_dir"
                    )
            except ConfigError as e:
                problem = str(e)
        comm = self.engine.comm
        if comm is not None and int(self.engine.world_size) > 1:
            problem = comm.broadcast_object(problem if self.is_main else None)
        if problem is not None:
            if locked:
                release_run_dir(self.run_dir)
            raise ConfigError(problem)
        return locked

    def _fit(self, resume: bool) -> dict[str, Any]:
        tc = self.config
        spe = int(self.engine.steps_per_epoch())
        resumed = self.resumed = self._restore(spe) if resume else False
        if not resumed:
            self.state = TrainState()
            random.seed(tc.seed)
            np.random.seed(tc.seed)  # noqa: NPY002 (seeding the global state)
            torch.manual_seed(tc.seed)
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._write_config()
            if not resumed:
                self.checkpoints.clear()
                self.summary_path.unlink(missing_ok=True)
        writer = (
            MetricsWriter(self.metrics_path, resume_epoch=self.state.epoch if resumed else None)
            if self.is_main
            else None
        )
        if writer is not None:
            self._flush_events(writer)
        self._writer = writer
        for cb in self.callbacks:
            cb.on_fit_start(self)
        self._saved_at, self._saved_step = _clock(), self.state.global_step
        self._snapshot = self._best_snapshot = None
        self._config_cache = self._config_dict()  # fixed for the run; every checkpoint holds it
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            disable=not (self.show_progress and self.is_main),
            transient=True,
        )
        try:
            with progress:
                while (
                    self.state.epoch < tc.epochs
                    and not self.state.stopped_early
                    and not self._steps_exhausted()
                ):
                    self._run_one_epoch(spe, progress, writer)
        except KeyboardInterrupt:
            self._save_on_interrupt()
            raise
        except NonFiniteLossError as e:
            self._stop_non_finite(spe, e)
            raise
        finally:
            self._writer = None
            if writer is not None:
                writer.close()
        summary = self._summary(spe)
        if self.is_main:
            atomic_write_text(self.summary_path, to_json(summary) + "\n")
            if not self.quiet:
                self._print_summary(summary)
        return summary

    # ---------------------------------------------------------------------------------------
    # epochs and steps

    def _non_finite(self, epoch: int, step: int, loss: float) -> NonFiniteLossError:
        """The one-line error for a NaN or infinite training loss at ``epoch``, ``step``."""
        rank = f" on rank {self.engine.rank}" if int(self.engine.world_size) > 1 else ""
        return NonFiniteLossError(
            f"the training loss is {loss} at epoch {epoch}, step {step}{rank}; {self._stopped()}"
        )

    def _stopped(self) -> str:
        """The likely causes and fixes of a non-finite stop (the tail of its one line)."""
        data = self.run_config.data.dataset if self.run_config is not None else None
        cause = "likely "
        if self.run_config is not None and self.run_config.train.autocast == "bf16":
            # finite features pass 'info --verify'; a bfloat16 forward can still overflow
            cause = (
                "likely the bfloat16 forward (train.autocast=bf16) overflowing or losing "
                "precision: try train.autocast=null; else "
            )
        return (
            f"the run is stopped: {cause}non-finite values in the features or edge weights "
            f"(check them with 'fleetgnn info {data or 'DATASET'} --verify'), else a learning "
            f"rate too high for this model: continue from the last finite checkpoint with a "
            f"lower one (--resume {self.run_dir} --set optim.lr=...)"
        )

    def _check_finite(self, epoch: int) -> None:
        """Stop (NonFiniteLossError) when the model or optimizer state holds NaN or inf.

        At every epoch end, before the evaluation (a diverged model is never the best epoch),
        and before each checkpoint, so the checkpoints stay finite.
        """
        if self._finite_at == self.state.global_step:  # an epoch end's save: checked already
            return
        bad = first_non_finite(self.engine.state_dict())
        if bad is not None:
            raise NonFiniteLossError(
                f"the engine state's {bad} holds NaN or inf after {self.state.global_step} steps "
                f"(epoch {epoch}); {self._stopped()}"
            )
        self._finite_at = self.state.global_step

    def _steps_exhausted(self) -> bool:
        """Whether the run has taken its ``train.max_steps`` steps."""
        limit = self.config.max_steps
        return limit is not None and self.state.global_step >= limit

    def _run_one_epoch(self, spe: int, progress: Progress, writer: MetricsWriter | None) -> None:
        st, tc = self.state, self.config
        epoch, start = st.epoch, st.next_step
        task = progress.add_task(f"epoch {epoch}", total=spe, completed=start, loss=_fmt(None))
        base_elapsed = st.partial.elapsed_s
        clock = self._clock()
        peak_device_memory(self._device(), reset=True)  # this epoch's own allocator peak
        t0 = clock()
        self.phase = f"training (epoch {epoch}, step {start})"

        # steps the engine ran whose numbers the device may still be computing: read once it
        # has (StepStats.ready), so the host never waits for the device between steps
        pending: list[tuple[int, Any]] = []

        def settle(wait: bool) -> None:
            """Read the pending steps the device has run (all of them when ``wait``), in order.

            Each goes through the non-finite loss check, the epoch's sums and the callbacks;
            then the bar shows the running loss.
            """
            if wait and pending:
                pending[-1][1].resolve()  # one wait: the earlier steps finished before it
            while pending and (wait or pending[0][1].ready()):
                step, stats = pending.pop(0)
                stats = stats.resolve()
                if not math.isfinite(stats.loss_sum):
                    pending.clear()
                    raise self._non_finite(epoch, step, stats.loss_sum)
                st.partial.add(stats)
                for cb in self.callbacks:  # before a checkpoint this step triggers
                    cb.on_step_end(self, epoch, step, stats)
            running = st.partial.loss_sum / st.partial.count if st.partial.count else None
            progress.update(task, loss=_fmt(running))

        def on_step(step: int, stats: StepStats) -> None:
            if step != st.next_step:
                raise RuntimeError(
                    f"engine {self.engine.name!r} reported step {step} of epoch {epoch}, expected "
                    f"{st.next_step}: run_epoch must report every step in order"
                )
            pending.append((step, stats))
            st.next_step = step + 1
            self.phase = f"training (epoch {epoch}, step {st.next_step})"
            st.global_step += 1
            settle(wait=False)
            progress.update(task, completed=st.next_step)
            stop = self._steps_exhausted() and st.next_step < spe  # checkpointed after evaluation
            every = tc.checkpoint_every
            if every > 0 and st.global_step % every == 0 and st.next_step < spe and not stop:
                settle(wait=True)  # a checkpoint holds every step's sums, all finite
                st.partial.elapsed_s = base_elapsed + (clock() - t0)
                self._save_checkpoint(spe)
            if stop:
                settle(wait=True)
                raise _MaxStepsReached

        returned: list[StepStats] = []
        partial = False
        try:
            if start < spe:
                returned = list(self.engine.run_epoch(epoch, start, on_step))
        except _MaxStepsReached:
            partial = True
            _wait_for_prefetch(self.engine)
        except BaseException:  # an interrupt: the steps run so far go into the sums it saves
            with contextlib.suppress(Exception):
                settle(wait=True)
            raise
        settle(wait=True)  # the epoch's one wait for the device
        if not partial and (st.next_step != spe or len(returned) != spe - start):
            raise RuntimeError(
                f"engine {self.engine.name!r} ran steps {start}..{st.next_step - 1} of epoch "
                f"{epoch} and returned {len(returned)} step stats; expected steps {start}.."
                f"{spe - 1} (steps_per_epoch={spe})"
            )
        train_time = base_elapsed + (clock() - t0)
        progress.remove_task(task)
        own_time = train_time
        stats, train_time = self._aggregate(st.partial, epoch, train_time, epoch_end=not partial)

        self._check_finite(epoch)
        last = epoch == tc.epochs - 1 or self._steps_exhausted()
        evaluated = (epoch + 1) % tc.eval_every == 0 or last
        # the training numbers go on record first: an evaluation that dies leaves them there
        record = self._record(stats, None, train_time, 0.0, partial)
        if writer is not None:
            writer.write(record)
        new_best = False
        if evaluated:
            t1 = clock()
            self.phase = f"evaluation after epoch {epoch}"
            ev = {k: float(v) for k, v in self.engine.evaluate().items()}
            eval_time = clock() - t1
            select = task_of(self.engine).select_metric  # higher is better
            if select not in ev:
                raise RuntimeError(
                    f"engine {self.engine.name!r}.evaluate() returned keys {sorted(ev)}; it must "
                    f"return its task's selection metric {select!r}"
                )
            if st.best_epoch is None or ev[select] > st.best.get(select, -math.inf):
                st.best_epoch, st.best = epoch, dict(ev)
                new_best = True
            st.stale_epochs = epoch - st.best_epoch
            if tc.patience is not None and st.stale_epochs >= tc.patience and not last:
                st.stopped_early = True
            record = self._record(stats, ev, train_time, eval_time, partial)
            if writer is not None:
                writer.replace_last(record)
        if self.is_main and not self.quiet:  # one line per epoch; the bar follows show_progress
            note = (
                "early stop" if st.stopped_early else "max_steps" if self._steps_exhausted() else ""
            )
            self.console.print(_epoch_line(record, note))

        st.last_train_loss = stats.loss
        if partial:  # stay inside the epoch: a resume with a larger limit continues from here
            st.partial.elapsed_s = own_time
        else:
            st.epoch_times.append(train_time)
            st.epoch, st.next_step, st.partial = epoch + 1, 0, StepSums()
        for cb in self.callbacks:  # before the epoch's checkpoint
            cb.on_epoch_end(self, record)
        self._epoch_end_checkpoint(spe, new_best, final=last or st.stopped_early)

    def _record(
        self,
        stats: EpochStats,
        ev: Mapping[str, float] | None,
        train_time: float,
        eval_time: float,
        partial: bool = False,
    ) -> dict[str, Any]:
        ev = ev or {}
        record = {
            "epoch": stats.epoch,
            "loss": stats.loss,
            "train_acc": stats.train_acc,
            "val_acc": ev.get("val_acc"),
            "test_acc": ev.get("test_acc"),
            "val_loss": ev.get("val_loss"),
            "eval_train_acc": ev.get("train_acc"),
            "evaluated": bool(ev),
            "epoch_time_s": train_time,
            "eval_time_s": eval_time,
            "times": dict(stats.times),
            "traffic": dict(stats.traffic),
            "memory": dict(stats.memory),
            "num_steps": stats.num_steps,
            "engine": self.engine.name,
            "world_size": int(self.engine.world_size),
            "extra": dict(stats.extra),
        }
        for key, value in ev.items():  # another task's metrics (link: val_auc, test_mrr, ...)
            if key != "train_acc" and key not in record:
                record[key] = value
        if partial:  # train.max_steps stopped the run inside this epoch
            record["partial"] = True
        return record

    def _aggregate(
        self, sums: StepSums, epoch: int, train_time: float, epoch_end: bool = True
    ) -> tuple[EpochStats, float]:
        """The epoch's stats over all ranks, and the slowest rank's training time.

        Losses and accuracies are sums of numerators and denominators over ranks; times are the
        slowest rank's (per rank in ``extra["per_rank"]``); traffic is summed over ranks (per
        rank in ``extra["per_rank"]``). One all-gather of ``3 + T + L + 1`` float64 values,
        through the engine's metered communicator. One rank: this rank's numbers.
        ``epoch_end=False`` (a partial epoch, the same on every rank) leaves out the engine's
        ``epoch_extra()``/``rank_extra()`` numbers, which engines compute at epoch ends.
        """
        memory = self._engine_memory()
        extra = self._engine_extra() if epoch_end else {}
        comm = self.engine.comm
        if comm is None or int(self.engine.world_size) == 1:
            return sums.to_epoch_stats(epoch, memory, extra), train_time
        tkeys, lkeys = sorted(sums.times), sorted(sums.traffic)
        mine = torch.tensor(
            [sums.loss_sum, sums.correct, sums.count]
            + [sums.times[k] for k in tkeys]
            + [sums.traffic[k] for k in lkeys]
            + [train_time],
            dtype=torch.float64,
        )
        ranks = torch.stack(comm.all_gather(mine))  # [W, 3 + T + L + 1]
        nt, nl = len(tkeys), len(lkeys)
        times_r, traffic_r = ranks[:, 3 : 3 + nt], ranks[:, 3 + nt : 3 + nt + nl]
        total = StepSums(
            loss_sum=float(ranks[:, 0].sum()),
            correct=int(ranks[:, 1].sum()),
            count=int(ranks[:, 2].sum()),
            num_steps=sums.num_steps,
            times={k: float(times_r[:, i].max()) for i, k in enumerate(tkeys)},
            traffic={k: int(traffic_r[:, i].sum()) for i, k in enumerate(lkeys)},
        )
        extra["per_rank"] = {
            "loss_sum": ranks[:, 0].tolist(),
            "count": [int(c) for c in ranks[:, 2].tolist()],
            "epoch_time_s": ranks[:, -1].tolist(),
            "times": {k: times_r[:, i].tolist() for i, k in enumerate(tkeys)},
            "traffic": {k: [int(v) for v in traffic_r[:, i].tolist()] for i, k in enumerate(lkeys)},
        }
        if epoch_end:  # small engine-specific per-rank numbers, e.g. reads per source
            gathered = comm.all_gather_object(dict(self.engine.rank_extra()))
            for key in gathered[0]:
                extra["per_rank"][key] = [d.get(key) for d in gathered]
        return total.to_epoch_stats(epoch, memory, extra), float(ranks[:, -1].max())

    def _device(self) -> torch.device:
        """The engine's device (``engine.device``)."""
        return torch.device(self.engine.device)

    def _clock(self) -> Any:
        """The engine's phase clock (synchronising on CUDA; the host clock by default)."""
        return self.engine.clock

    def _engine_memory(self) -> dict[str, int]:
        """Peak memory per tier from the engine's optional ``peak_memory()`` method.

        On CUDA the allocator's own peak of this epoch is added beside the engine's count
        (``allocator_peak``, ``allocator_reserved_peak``: ``torch.cuda.max_memory_allocated``
        and ``max_memory_reserved`` since the epoch started).
        """
        out = {str(k): int(v) for k, v in self.engine.peak_memory().items()}
        out.update(peak_device_memory(self._device()))
        return out

    def _engine_extra(self) -> dict[str, Any]:
        """Engine-specific numbers from the engine's ``epoch_extra()``."""
        return dict(self.engine.epoch_extra())

    # ---------------------------------------------------------------------------------------
    # checkpoints

    def _epoch_end_checkpoint(self, spe: int, best: bool, final: bool) -> None:
        """Save at an epoch end when due, else keep the checkpoint in memory (see the module doc).

        Due: the run's last epoch (``final``), a ``checkpoint_every`` step passed since the last
        save, or ``checkpoint_interval`` seconds passed (rank 0's clock, broadcast). Every rank
        reaches the same decision; the broadcast happens only where the other rules, which every
        rank evaluates alike, leave it open.
        """
        if final or self._steps_due() or self._interval_due():
            self._save_checkpoint(spe, best=best)
        else:
            self._take_snapshot(spe, best=best)

    def _steps_due(self) -> bool:
        """Whether a multiple of ``checkpoint_every`` steps was passed since the last save."""
        every = self.config.checkpoint_every
        return every > 0 and self.state.global_step // every > self._saved_step // every

    def _interval_due(self) -> bool:
        """Whether ``checkpoint_interval`` seconds passed since the last save (rank 0 decides)."""
        interval = self.config.checkpoint_interval
        if interval <= 0:
            return True
        due = _clock() - self._saved_at >= interval
        comm = self.engine.comm
        if comm is not None and int(self.engine.world_size) > 1:
            due = bool(comm.broadcast_object(due if self.is_main else None))
        return due

    def _checkpoint(
        self, spe: int, engine_state: Mapping[str, Any], partials: list[Any]
    ) -> dict[str, Any]:
        """The checkpoint dict of the run as it is now (rank 0)."""
        return {
            "format": CHECKPOINT_FORMAT,
            "trainer": self.state.to_dict(),
            "partials": partials,
            "engine": engine_state,
            "callbacks": callback_states(self.callbacks),
            "rng": capture_rng(),
            "config": self._config_cache if self._config_cache is not None else self._config_dict(),
            "engine_config": engine_config_dict(self.engine),
            "engine_name": self.engine.name,
            "world_size": int(self.engine.world_size),
            "steps_per_epoch": spe,
        }

    def _save_checkpoint(self, spe: int, best: bool = False) -> None:
        """Save ``last.pt`` (and ``best.pt`` when ``best``: the epoch just evaluated is the best).

        A best epoch kept in memory (:meth:`_take_snapshot`) is written as ``best.pt`` first.
        Collective in multi-rank runs (every rank calls it; rank 0 writes).
        """
        self._check_finite(self.state.epoch)  # never a checkpoint of a diverged model
        engine_state = self.engine.state_dict()  # on every rank: it may communicate
        # every rank's partial-epoch sums (collective), so a resumed rank gets back its own
        comm = self.engine.comm
        partial = self.state.partial.to_dict()
        partials = comm.all_gather_object(partial) if comm is not None else [partial]
        self._saved_at, self._saved_step = _clock(), self.state.global_step
        best_state, self._snapshot, self._best_snapshot = self._best_snapshot, None, None
        if not self.is_main:
            return
        self.checkpoints.save(
            self._checkpoint(spe, engine_state, partials), best=best, best_state=best_state
        )
        self._saved_at = _clock()  # the interval counts from the end of the write

    def _take_snapshot(self, spe: int, best: bool) -> None:
        """Keep this epoch end's checkpoint in memory (no disk write; engine state copied).

        Only at epoch ends, where every rank's partial-epoch sums are empty (no collective).
        """
        engine_state = self.engine.state_dict()  # on every rank: it may communicate
        if not self.is_main:
            return
        partials = [self.state.partial.to_dict()] * int(self.engine.world_size)
        snap = self._checkpoint(spe, detached_copy(engine_state), partials)
        self._snapshot = snap
        if best:
            self._best_snapshot = snap

    def _save_on_interrupt(self) -> None:
        """Write the checkpoint kept in memory, if newer than ``last.pt`` (rank 0).

        A failure to write is a warning: the interrupt goes on.
        """
        snap, best = self._snapshot, self._best_snapshot
        self._snapshot = self._best_snapshot = None
        if snap is None or not self.is_main:
            return
        try:
            self.checkpoints.save(
                snap, best=best is snap, best_state=None if best is snap else best
            )
        except Exception as e:  # noqa: BLE001 - reported, and the interrupt carries on
            warnings.warn(
                f"could not save the checkpoint on interrupt ({type(e).__name__}: {e}); a "
                f"resume continues from the previous one",
                stacklevel=2,
            )

    def _stop_non_finite(self, spe: int, err: NonFiniteLossError) -> None:
        """Keep what was good when NaN or inf stops the run (rank 0 writes).

        The last epoch end's checkpoint kept in memory (and the best epoch's) is written, as on
        an interrupt: both passed :meth:`_check_finite`, so ``last.pt`` is the last finite state
        and ``best.pt`` the last good evaluation's. ``summary.json`` records the best epoch so
        far with ``stopped: "non_finite"`` and the error's line as ``stop_reason``.
        """
        self._save_on_interrupt()
        if not self.is_main:
            return
        summary = {**self._summary(spe), "stopped": "non_finite", "stop_reason": str(err)}
        try:
            atomic_write_text(self.summary_path, to_json(summary) + "\n")
        except OSError as e:  # the stop's own line is the one to print
            warnings.warn(f"could not write the summary ({e.strerror or e})", stacklevel=2)

    def _restore(self, spe: int) -> bool:
        """Restore the newest checkpoint that fits this run (``last.pt``, else ``prev.pt``).

        A checkpoint that loads but holds the wrong things (malformed trainer state, an engine
        state the model or optimizer refuses, bad RNG states) is skipped with a warning, as an
        unreadable one is, and so is a ``last.pt`` written with another config when ``prev.pt``
        fits this one. A config that differs from every checkpoint's is the user's change, not
        damage: its ConfigError is raised.
        """
        restored: list[TrainState] = []

        def apply(ckpt: dict[str, Any]) -> None:
            restored[:] = [self._apply_checkpoint(ckpt, spe)]

        if self.checkpoints.load_latest(check=apply) is None:
            return False
        self.state = restored[0]
        return True

    def _apply_checkpoint(self, ckpt: Mapping[str, Any], spe: int) -> TrainState:
        """Check ``ckpt`` against this run and load it into the engine; returns its state.

        Raises:
            CheckpointError: The checkpoint's contents are malformed or do not fit the engine.
            ConfigError: The run's config differs from the checkpoint's where it matters.
        """
        state = checked_state(ckpt, self.engine, self.run_config, spe)
        apply_optim_changes(ckpt, self.run_config)  # e.g. a lower optim.lr after a NaN stop
        restore_rng(ckpt["rng"])
        try:
            self.engine.load_state_dict(ckpt["engine"])
        except ConfigError:
            raise
        except (*CONTENT_ERRORS, IndexError, RuntimeError) as e:
            detail = " ".join(str(e).split())[:300]
            raise CheckpointError(
                f"it does not fit this run's model and optimizer ({type(e).__name__}: {detail})"
            ) from e
        try:  # after the optimizer: a scheduler's state on the restored learning rates
            load_callback_states(self.callbacks, ckpt.get("callbacks"))
        except (*CONTENT_ERRORS, IndexError, RuntimeError) as e:
            detail = " ".join(str(e).split())[:300]
            raise CheckpointError(
                f"its callback states do not fit this run ({type(e).__name__}: {detail})"
            ) from e
        return state

    # ---------------------------------------------------------------------------------------
    # summary

    def _config_dict(self) -> dict[str, Any]:
        """What ``config.yaml`` and checkpoints record of the configuration."""
        if self.run_config is not None:
            return self.run_config.to_dict()
        return {
            "trainer": dataclasses.asdict(self.config),
            "engine": {"name": self.engine.name, "config": engine_config_dict(self.engine)},
        }

    def _write_config(self) -> None:
        """Write ``config.yaml`` durably: the run config as recorded, else the engine's settings.

        The run config goes through :func:`~fleetgnn.config.run.save_config`, the one writer of
        config files (the same text, the same fsynced atomic write and one-line disk-full error).
        """
        path = self.run_dir / "config.yaml"
        if self.run_config is not None:
            save_config(self.run_config, path, recorded=True)
        else:
            atomic_write_text(
                path, yaml.safe_dump(self._config_dict(), sort_keys=False, default_flow_style=None)
            )

    def _summary(self, spe: int) -> dict[str, Any]:
        st = self.state
        times = st.epoch_times
        summary = {
            "test_acc": st.best.get("test_acc"),
            "val_acc": st.best.get("val_acc"),
            "val_loss": st.best.get("val_loss"),
            "train_acc": st.best.get("train_acc"),
            "best_epoch": st.best_epoch,
            "final_train_loss": st.last_train_loss,
            "epochs": len(times),
            "stopped_early": st.stopped_early,
            "stopped": self._stop_reason(),
            "mean_epoch_time_s": sum(times) / len(times) if times else None,
            # a partial epoch (train.max_steps): this rank's training time in it is included
            "total_train_time_s": sum(times) + (st.partial.elapsed_s if st.next_step else 0.0),
            "steps_per_epoch": spe,
            "total_steps": st.global_step,
            "partial_epoch_steps": st.next_step,
            "engine": self.engine.name,
            "world_size": int(self.engine.world_size),
            "model": _model_name(self.engine, self.run_config),
            "run_dir": str(self.run_dir),
            "config": self._config_dict(),
        }
        for key, value in st.best.items():  # another task's metrics at the best epoch
            if key.startswith(("val_", "test_")):
                summary.setdefault(key, value)
        return summary

    def _stop_reason(self) -> str | None:
        """Why the run stopped: ``"patience"``, ``"epochs"`` or ``"max_steps"`` (else ``None``)."""
        if self.state.stopped_early:
            return "patience"
        if self.state.epoch >= self.config.epochs:
            return "epochs"
        return "max_steps" if self._steps_exhausted() else None

    def _print_summary(self, summary: Mapping[str, Any]) -> None:
        """The end-of-run table (the task's metrics first), then its footnote as plain text.

        The footnote is printed apart from the table, so it wraps at the console's width, not
        the table's (redirected output: one paragraph, not a column of short lines).
        """
        table = Table(title=f"fleetgnn run summary ({summary['engine']})")
        table.add_column("metric", style="bold")
        table.add_column("value", justify="right")
        for key in (
            *metric_keys(summary),
            "best_epoch",
            "final_train_loss",
            "epochs",
            "stopped",
            "mean_epoch_time_s",
            "total_steps",
            "engine",
            "world_size",
            "model",
        ):
            table.add_row(key, _fmt(summary.get(key)))
        self.console.print(table)
        self.console.print(summary_note(summary), markup=False, highlight=False)


def _checked(engine: Any) -> EngineBase:
    """``engine``, if it is an :class:`~fleetgnn.engines.EngineBase`, else a one-line error.

    EngineBase declares what the Trainer calls, with defaults.
    """
    if not isinstance(engine, EngineBase):
        raise TypeError(
            f"the Trainer drives engines that subclass fleetgnn.engines.EngineBase (got "
            f"{type(engine).__name__}); subclass it: it supplies the optional members' defaults "
            f"(comm, device, clock, peak_memory, epoch_extra, rank_extra, drain, close)"
        )
    return engine


def _model_name(engine: Engine, run_config: Config | None) -> str:
    if run_config is not None:
        return run_config.model.name
    module = engine.module if engine.module is not None else engine.model
    return type(module).__name__ if module is not None else "-"


def _wait_for_prefetch(engine: Engine) -> None:
    """Wait for the batch an engine's prefetch thread may still prepare after an early stop.

    The built-in mini-batch engines prepare step ``k + 1``'s batch in a background thread while
    step ``k`` trains; leaving ``run_epoch`` after step ``k`` leaves it in flight, and its
    sampling and gathering may communicate (on the store's own group), so it must finish before
    the evaluation's collectives start: ``engine.drain()`` waits for it (a no-op by default).
    """
    engine.drain()


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4f}"
    return str(v)


def _epoch_line(r: Mapping[str, Any], note: str = "") -> str:
    parts = [
        f"epoch {r['epoch']:>3}",
        f"loss {_fmt(r['loss'])}",
        f"train {_fmt(r['train_acc'])}",
    ]
    if r["evaluated"] and r.get("val_acc") is None and r.get("val_auc") is not None:  # links
        parts += [f"val auc {_fmt(r['val_auc'])}", f"test auc {_fmt(r.get('test_auc'))}"]
    elif r["evaluated"]:
        parts += [f"val {_fmt(r['val_acc'])}", f"test {_fmt(r['test_acc'])}"]
    parts.append(f"{r['epoch_time_s']:.2f}s")
    if r.get("partial"):
        parts.append(f"({r['num_steps']} steps)")
    if note:
        parts.append(f"[yellow]{note}[/]")
    return "  ".join(parts)
