"""Link prediction on the engines: which engines train it, and the full-graph step and evaluation.

So far the ``reference`` engine in ``full`` mode trains ``train.task=link``
(:data:`~fleetgnn.config.run.LINK_ENGINES`); every other engine refuses a link task in one line
naming it (:func:`check_task`). A full-graph link step runs the encoder over the message-passing
graph of training edges, scores every training edge and its keyed negatives
(:class:`~fleetgnn.tasks.NegativeSampler`, keyed by the global step) with the model's decoder,
and trains on the task's loss, averaged over the training edges.
"""

from __future__ import annotations

from typing import Any

import torch

from fleetgnn.config.run import LINK_ENGINES
from fleetgnn.engines.step import StepLoss
from fleetgnn.errors import ConfigError
from fleetgnn.tasks import LinkPrediction, Task


def check_task(engine: str, mode: str, task: Task | None) -> None:
    """Raise :class:`ConfigError` if ``engine`` in ``mode`` cannot train ``task``."""
    if isinstance(task, LinkPrediction) and (engine, mode) not in LINK_ENGINES:
        can = ", ".join(f"{e} (mode {m})" for e, m in LINK_ENGINES)
        raise ConfigError(
            f"the {engine} engine (mode {mode}) does not train link prediction yet; "
            f"link prediction runs on: {can}"
        )


def check_link_model(model: torch.nn.Module) -> None:
    """Raise :class:`ConfigError` unless ``model`` has a pair ``decoder`` (a LinkModel)."""
    if not callable(getattr(model, "decoder", None)):
        raise ConfigError(
            f"link prediction needs a model with a pair decoder (got {type(model).__name__}); "
            f"wrap the encoder: fleetgnn.nn.decoders.LinkModel(encoder, DotDecoder())"
        )


def pair_scores(
    decoder: Any, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, neg: torch.Tensor
) -> torch.Tensor:
    """Scores ``[P, 1 + K]`` of positives ``(src, dst)`` (column 0) and ``(src, neg[:, k])``."""
    k = neg.shape[1]
    pos = decoder(h[src], h[dst]).unsqueeze(1)
    negs = decoder(h[src.repeat_interleave(k)], h[neg.reshape(-1)]).view(-1, k)
    return torch.cat([pos, negs], dim=1)


def full_graph_link_loss(
    model: Any, task: LinkPrediction, h: torch.Tensor, loss: Any, step: int
) -> StepLoss:
    """The step's loss over every training edge and its negatives, from all embeddings ``h``."""
    src, dst = task.train_pairs()
    neg = task.sampler.sample(src, dst, step)
    dev = h.device
    scores = pair_scores(model.decoder, h, src.to(dev), dst.to(dev), neg.to(dev))
    return StepLoss.of(loss, scores, None, int(src.numel()), task)  # type: ignore[arg-type]
