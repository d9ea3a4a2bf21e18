"""Callbacks: the Trainer's hooks for a user's own logging, its schedule and TensorBoard.

A :class:`Callback` is called by :class:`~fleetgnn.train.Trainer` on **every rank**, at the same
points of the run on each (write files from rank 0 only: ``trainer.is_main``):

=================================== ==========================================================
hook                                when
=================================== ==========================================================
``on_fit_start(trainer)``           after a checkpoint is restored (``trainer.resumed``) and
                                    ``metrics.jsonl`` is opened, before the first step
``on_step_end(trainer, epoch,       after each optimisation step (its optimizer step taken),
step, stats)``                      before a checkpoint that step may trigger
``on_epoch_end(trainer, record)``   after an epoch is recorded (and evaluated, if due), before
                                    its checkpoint; ``record`` is its ``metrics.jsonl`` line
                                    (``"partial": true`` when ``train.max_steps`` ended it early)
``on_fit_end(trainer, summary)``    when :meth:`~fleetgnn.train.Trainer.fit` ends: the summary,
                                    or ``None`` when the run failed or was interrupted
=================================== ==========================================================

A callback with state to resume returns it from ``state_dict()`` (anything ``torch.save``
stores, or ``None``); checkpoints hold it under the callback's ``key`` and a resumed run gives it
back to ``load_state_dict`` before ``on_fit_start``. Keys must be unique among a Trainer's
callbacks (default: the class's qualified name).

``train.callbacks`` names callbacks in the run config as ``"module:Class"``: each is imported and
built with no arguments in every process (:func:`load_callbacks`). The Trainer's own callbacks
(the schedule, TensorBoard) are put together in :mod:`fleetgnn.train.hooks`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from fleetgnn.engines.base import StepStats
from fleetgnn.errors import ConfigError

#: A :class:`~fleetgnn.train.Trainer` (not imported here: the Trainer imports this module).
Trainer = Any


class Callback:
    """Hooks of :class:`~fleetgnn.train.Trainer` (every method optional; the defaults do nothing).

    Attributes:
        key: Name of the callback's state in checkpoints (default: the class's qualified name).
    """

    @property
    def key(self) -> str:
        """Where checkpoints keep this callback's state."""
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}"

    def on_fit_start(self, trainer: Trainer) -> None:
        """The run starts (or resumes: ``trainer.resumed``)."""

    def on_step_end(self, trainer: Trainer, epoch: int, step: int, stats: StepStats) -> None:
        """Step ``step`` of ``epoch`` has run; ``stats`` is this rank's."""

    def on_epoch_end(self, trainer: Trainer, record: Mapping[str, Any]) -> None:
        """Epoch ``record["epoch"]`` is recorded (aggregated over ranks, evaluated if due)."""

    def on_fit_end(self, trainer: Trainer, summary: Mapping[str, Any] | None) -> None:
        """The run has ended (``summary`` ``None``: failed or interrupted)."""

    def state_dict(self) -> Any:
        """What a checkpoint keeps of this callback (``None``: nothing)."""
        return None

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s value from a checkpoint."""


def check_callbacks(callbacks: Sequence[Any]) -> list[Callback]:
    """``callbacks`` as a list, each a :class:`Callback` with a key of its own.

    Raises:
        ConfigError: Something that is not a :class:`Callback`, or two with the same key.
    """
    out: list[Callback] = []
    seen: set[str] = set()
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise ConfigError(
                f"Trainer's 'callbacks' must be fleetgnn.train.Callback instances (got "
                f"{type(cb).__name__}); subclass Callback and override the hooks you need"
            )
        if cb.key in seen:
            raise ConfigError(
                f"two Trainer callbacks have the key {cb.key!r}; give each its own 'key' property "
                f"(checkpoints keep their states under it)"
            )
        seen.add(cb.key)
        out.append(cb)
    return out


def load_callbacks(names: Sequence[str]) -> list[Callback]:
    """Import and build the callbacks of ``train.callbacks`` (``"module:Class"``, no arguments).

    Raises:
        ConfigError: A module that cannot be imported, a missing name, or something that is not
            a :class:`Callback` class, naming ``train.callbacks``.
    """
    out: list[Callback] = []
    for name in names:
        module, sep, attr = name.partition(":")
        if not sep:
            module, _, attr = name.rpartition(".")
        where = f"train.callbacks: {name!r}"
        try:
            mod = importlib.import_module(module.strip())
        except Exception as e:  # noqa: BLE001 - any import failure is the user's module
            raise ConfigError(
                f"{where}: cannot import module {module!r} ({type(e).__name__}: {e}); give "
                f"'module:Class' with the module on PYTHONPATH of every process"
            ) from None
        cls = getattr(mod, attr.strip(), None)
        if not (isinstance(cls, type) and issubclass(cls, Callback)):
            found = "not found" if cls is None else f"a {type(cls).__name__}"
            raise ConfigError(
                f"{where}: {attr!r} in module {module!r} is {found}, expected a subclass of "
                f"fleetgnn.train.Callback"
            )
        try:
            out.append(cls())
        except Exception as e:  # noqa: BLE001 - the user's constructor
            raise ConfigError(
                f"{where}: {attr}() failed ({type(e).__name__}: {e}); train.callbacks builds "
                f"each callback with no arguments"
            ) from None
    return out


def callback_states(callbacks: Sequence[Callback]) -> dict[str, Any]:
    """The checkpointed states of ``callbacks`` (copies), by key; stateless callbacks omitted."""
    import copy

    states = {cb.key: cb.state_dict() for cb in callbacks}
    return {k: copy.deepcopy(v) for k, v in states.items() if v is not None}


def load_callback_states(callbacks: Sequence[Callback], states: Mapping[str, Any] | None) -> None:
    """Give each callback its state from a checkpoint (a callback without one keeps its own)."""
    for cb in callbacks:
        if states and cb.key in states:
            cb.load_state_dict(states[cb.key])
