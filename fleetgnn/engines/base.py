"""The engine protocol every training strategy implements, and the stats it reports.

An engine owns the model, the optimizer and the data pipeline of one strategy (``reference``,
``minibatch``, ``split``, ``fullgraph``, ``offload``). The :class:`~fleetgnn.train.Trainer` drives
it epoch by epoch and step by step; everything random in an epoch is keyed by
``(seed, epoch, step)``, so an epoch can be resumed at any step and reproduce the uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

# the link kinds traffic is reported in, re-exported for engines and the Trainer
from fleetgnn.distributed.traffic import LINK_KINDS as LINK_KINDS
from fleetgnn.types import Closing

if TYPE_CHECKING:
    import torch

    from fleetgnn.engines.common import DistSetup

#: Time-breakdown keys every engine reports (seconds; absent phases are 0).
TIME_KEYS: tuple[str, ...] = (
    "sample",
    "gather",
    "forward",
    "backward",
    "communication",
    "optimizer",
    "total",
)


@dataclasses.dataclass(frozen=True)
class StepStats:
    """What one optimisation step reports.

    Attributes:
        loss_sum: Sum of per-node losses over this step's training nodes (this rank).
        correct: Number of correctly classified training nodes in this step (this rank).
        count: Number of training nodes in this step (this rank).
        times: Seconds per phase (keys from :data:`TIME_KEYS`).
        traffic: Bytes per link kind moved in this step.
    """

    loss_sum: float
    correct: int
    count: int
    times: Mapping[str, float] = dataclasses.field(default_factory=dict)
    traffic: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def ready(self) -> bool:
        """Always: its numbers are on the host (unlike a ``PendingStepStats``'s)."""
        return True

    def resolve(self) -> StepStats:
        """Itself (the numbers are resolved)."""
        return self


@dataclasses.dataclass(frozen=True)
class EpochStats:
    """What one epoch reports (aggregated over steps and, for distributed engines, ranks).

    Attributes:
        epoch: Epoch index (0-based).
        loss: Mean training loss per training node (sum of losses / number of nodes).
        train_acc: Training accuracy of the epoch's forward passes (with dropout on).
        num_steps: Optimisation steps taken.
        times: Seconds per phase, summed over steps (keys from :data:`TIME_KEYS`).
        traffic: Bytes per link kind (keys from :data:`LINK_KINDS`).
        memory: Peak bytes per memory tier (e.g. ``{"device": ..., "host": ...}``).
        extra: Engine-specific numbers (e.g. hidden communication fraction).
    """

    epoch: int
    loss: float
    train_acc: float
    num_steps: int
    times: Mapping[str, float] = dataclasses.field(default_factory=dict)
    traffic: Mapping[str, int] = dataclasses.field(default_factory=dict)
    memory: Mapping[str, int] = dataclasses.field(default_factory=dict)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return dataclasses.asdict(self)


StepCallback = Callable[[int, StepStats], None]


def resolve_steps(stats: Sequence[Any]) -> list[StepStats]:
    """The plain :class:`StepStats` of steps possibly in flight, waiting once (for the last).

    A step's device work finishes before the next one's, so after the last step's numbers are
    read every earlier step's are ready.
    """
    if stats:
        stats[-1].resolve()
    return [s.resolve() for s in stats]


@runtime_checkable
class Engine(Protocol):
    """A training strategy.

    Distributed engines also expose ``comm``, their metered
    :class:`~fleetgnn.distributed.Communicator`: the Trainer sums each epoch's numbers over ranks
    through it (and gathers every rank's partial-epoch sums at checkpoints), so every rank must
    reach the same epoch ends and checkpoints. The optional members (``epoch_extra()``,
    ``rank_extra()``, ``peak_memory()``, ``drain()``, ``close()`` ...) and their defaults are
    :class:`EngineBase`'s.

    ``run_epoch(epoch, start_step, on_step)`` runs steps ``start_step .. steps_per_epoch() - 1`` of
    ``epoch``; after each step it calls ``on_step(step, stats)`` (the Trainer checkpoints and
    updates progress there). ``stats`` may still be in flight on the device
    (:class:`~fleetgnn.engines.marks.PendingStepStats`: ``ready()`` says whether reading its
    numbers would wait, ``resolve()`` gives the plain :class:`StepStats`); the list
    ``run_epoch`` returns holds resolved ones. Batches, sampling and dropout of a step depend
    only on ``(seed, epoch, step)``, never on earlier steps' random draws, so resuming at
    ``start_step`` reproduces the uninterrupted run.

    The Trainer takes engines of :class:`EngineBase`, which declares the optional members
    (communicator, device, clock, per-epoch numbers, ``drain``, ``close``) with defaults.
    """

    name: str
    world_size: int
    rank: int

    def steps_per_epoch(self) -> int:
        """Number of optimisation steps in one epoch (equal on every rank)."""
        ...

    def run_epoch(
        self, epoch: int, start_step: int = 0, on_step: StepCallback | None = None
    ) -> list[StepStats]:
        """Run the steps of ``epoch`` from ``start_step`` on; returns this call's step stats."""
        ...

    def evaluate(self) -> dict[str, float]:
        """Accuracy (and loss) on each split, aggregated over ranks.

        Keys: ``train_acc``, ``val_acc``, ``test_acc``, ``val_loss``.
        """
        ...

    def state_dict(self) -> dict[str, Any]:
        """Model and optimizer state (everything needed to resume besides the Trainer's own)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...


class EngineBase(Closing):
    """The engine protocol's optional members with their defaults, and a context manager.

    The :class:`~fleetgnn.train.Trainer` drives engines of this class (the built-in ones, and
    any user engine that subclasses it and implements :class:`Engine`'s methods) and calls
    every member below without probing: an engine overrides what it has.

    ======================  ============================================  ================
    member                  what the Trainer uses it for                   default
    ======================  ============================================  ================
    ``comm``                summing epochs over ranks, broadcasts          ``None`` (alone)
    ``device``              the allocator's peak memory per epoch          the CPU
    ``clock``               epoch and evaluation times                     host clock
    ``config``              the typed engine config, for checkpoints       ``None``
    ``module``, ``model``   the model (names, checkpoints' checks)         ``None``
    ``peak_memory()``       bytes per memory tier, per epoch               ``{}``
    ``epoch_extra()``       engine numbers of the epoch (metrics.jsonl)    ``{}``
    ``rank_extra()``        per-rank numbers, gathered at epoch ends       ``{}``
    ``drain()``             wait for a prefetch after an early stop        nothing
    ``close()``             release threads, shared memory, groups         nothing
    ======================  ============================================  ================

    ``with build_engine(...) as engine:`` releases the engine's threads, shared memory and
    process groups at the end of the block, also on an exception.
    """

    name: str = "engine"
    world_size: int = 1
    rank: int = 0
    module: Any = None  # the unwrapped model
    model: Any = None
    optimizer: Any = None
    config: Any = None
    comm: Any = None
    meter: Any = None  # the communicator's traffic meter
    device: Any = "cpu"
    clock: Callable[[], float] = staticmethod(time.perf_counter)

    def peak_memory(self) -> Mapping[str, int]:
        """Peak bytes per memory tier of the last epoch (none by default)."""
        return {}

    def epoch_extra(self) -> Mapping[str, Any]:
        """Engine-specific numbers of the last epoch, summed over ranks (none by default)."""
        return {}

    def rank_extra(self) -> Mapping[str, Any]:
        """This rank's engine numbers of the last epoch, gathered per rank (none by default)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Model (unwrapped) and optimizer state; identical on every rank."""
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def drain(self) -> None:
        """Wait for background work a step left in flight (nothing by default).

        The Trainer calls it after stopping an epoch early, before its next collectives.
        """

    def close(self) -> None:
        """Release what the engine holds (nothing by default)."""


class DistributedEngine(EngineBase):
    """An engine over a process group, holding the set-up it was constructed with.

    The set-up (:class:`~fleetgnn.engines.common.DistSetup`, from
    :func:`~fleetgnn.engines.common.setup_distributed`) is fixed for the engine's life;
    ``config``, ``ctx``, ``rank``, ``world_size``, ``device``, ``clock``, ``dtype``, ``seed``,
    ``meter`` and ``comm`` read it.

    Args:
        dist: The engine's distributed set-up.
        graph: The dataset.
    """

    def __init__(self, dist: DistSetup, graph: Any) -> None:
        self.dist = dist
        self.graph = graph

    @property
    def config(self) -> Any:
        """The engine's checked typed config."""
        return self.dist.config

    @property
    def ctx(self) -> Any:
        """This process's :class:`~fleetgnn.distributed.DistContext`."""
        return self.dist.ctx

    @property  # type: ignore[override]
    def rank(self) -> int:
        """This process's rank."""
        return self.dist.rank

    @property  # type: ignore[override]
    def world_size(self) -> int:
        """The number of ranks."""
        return self.dist.world_size

    @property
    def device(self) -> torch.device:
        """The rank's device (its GPU, or the CPU)."""
        return self.dist.device

    @property
    def clock(self) -> Callable[[], float]:
        """The phase clock on :attr:`device` (CUDA-synchronising on a GPU)."""
        return self.dist.clock

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point dtype of features and parameters."""
        return self.dist.dtype

    @property
    def seed(self) -> int:
        """The config's seed."""
        return self.dist.seed

    @property
    def meter(self) -> Any:
        """The traffic meter of :attr:`comm`."""
        return self.dist.meter

    @property
    def comm(self) -> Any:
        """The metered :class:`~fleetgnn.distributed.Communicator` of the group."""
        return self.dist.comm


class FullGraphEngineBase(EngineBase):
    """An engine with one optimisation step per epoch over the whole graph (``train_step``)."""

    def train_step(self, epoch: int) -> StepStats:
        """The epoch's step (implemented by the engine)."""
        raise NotImplementedError

    def steps_per_epoch(self) -> int:
        """One full-graph step per epoch."""
        return 1

    def run_epoch(
        self, epoch: int, start_step: int = 0, on_step: StepCallback | None = None
    ) -> list[StepStats]:
        """Run the epoch's single step (nothing when ``start_step >= 1``)."""
        self.module.train()
        out: list[StepStats] = []
        if start_step < 1:
            stats = self.train_step(epoch)
            out.append(stats)
            if on_step is not None:
                on_step(0, stats)
        return resolve_steps(out)


def run_steps(
    engine: Any, epoch: int, start_step: int, on_step: StepCallback | None = None
) -> list[StepStats]:
    """Steps ``start_step..`` of ``epoch`` through ``engine.train_step``, in order.

    The loop of engines that run each step inline; ``on_step(step, stats)`` after each (stats
    possibly in flight); returns the resolved stats.
    """
    out = []
    for step in range(start_step, engine.steps_per_epoch()):
        stats = engine.train_step(epoch, step)
        out.append(stats)
        if on_step is not None:
            on_step(step, stats)
    return resolve_steps(out)
