"""Training loops the sections time: fleetgnn's engine steps and the peers' optimizer steps.

- :class:`EngineSteps`: a callable running the next epoch of an engine per call (all its steps,
  or the first ``steps``), adding up the engine's own step times per phase (:data:`PHASES`);
- :func:`peer_optimizer`: the optimizer a PyG peer trains with (the engines' own, from the
  run config: fused Adam on CUDA);
- :func:`optimizer_step`: ``zero_grad -> backward -> step`` of a peer's loss.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from fleetgnn.config import Config

#: The phases of the engine's step stats that :class:`EngineSteps` adds up.
PHASES: tuple[str, ...] = ("sample", "gather", "forward", "backward", "optimizer")


class EngineSteps:
    """A callable running the next epoch(s) of an engine each call (epochs keep counting up).

    Args:
        engine: A fleetgnn engine (``run_epoch``, ``train_step``, ``steps_per_epoch``).
        steps: Steps of each epoch to run (``None``: the whole epoch, through ``run_epoch``;
            else the first ``steps``, through ``train_step``, the model in training mode).
        per_call: Epochs per call.
    """

    def __init__(self, engine: Any, steps: int | None = None, per_call: int = 1) -> None:
        self.engine, self.steps, self.per_call = engine, steps, per_call
        self.epoch = 0
        self.phase_s = dict.fromkeys(PHASES, 0.0)

    def __call__(self) -> None:
        """Run the next ``per_call`` epochs (or their first ``steps`` steps)."""
        for _ in range(self.per_call):
            if self.steps is None:
                stats = self.engine.run_epoch(self.epoch)
            else:
                self.engine.model.train()
                stats = [self.engine.train_step(self.epoch, s) for s in range(self.steps)]
            for step in stats:
                for k in PHASES:
                    self.phase_s[k] += float(step.times.get(k, 0.0))
            self.epoch += 1

    def phases(self) -> dict[str, float]:
        """Seconds per epoch (or per ``steps``) in each phase, the mean over every one run."""
        return {k: v / max(self.epoch, 1) for k, v in self.phase_s.items()}


def peer_optimizer(
    cfg: Config, model: nn.Module, device: torch.device | str | None = None
) -> torch.optim.Optimizer:
    """The optimizer the engines build from ``cfg`` (``optim.*``), over a peer's parameters.

    ``device``: where the peer's parameters are (``None``: the first parameter's device). The
    engines use torch's fused Adam/AdamW on CUDA (``optimizer_from_config``); the peers get the
    same, so a figure compares the layers and not two optimizers.
    """
    from fleetgnn.train.setup import optimizer_from_config

    if device is None:
        device = next(iter(model.parameters())).device
    return optimizer_from_config(model, cfg.optim, device)


def optimizer_step(opt: torch.optim.Optimizer, loss: Tensor) -> None:
    """One optimisation step of a peer: ``zero_grad -> backward -> step``."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
