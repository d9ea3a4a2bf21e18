"""What the sampled distributed engines (``minibatch``, ``split``) share.

The epoch loop around a prefetched batch per step, and evaluation by streaming layer-wise
inference. An engine on this base says how a step's :class:`~fleetgnn.engines.batch.MiniBatch`
is sampled (``_sample``) and prepared (``prepare(epoch, step)`` fills in its rows, run in the
:class:`~fleetgnn.engines.step.Prefetcher`'s thread), how one prepared step trains
(``_run_step``, which goes through :func:`~fleetgnn.engines.step.train_step`), what it sums at
the start and end of an epoch, and where evaluation reads topology (``eval_topology``) and input
rows (``_features``).
"""

from __future__ import annotations

from typing import Any

import torch

from fleetgnn.engines.base import DistributedEngine, StepCallback, StepStats, resolve_steps
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.engines.chunks import Chunking
from fleetgnn.engines.inference import streaming_metrics
from fleetgnn.engines.step import Prefetcher
from fleetgnn.engines.temporal_node import node_blocks


class SampledEngine(DistributedEngine):
    """A sampled mini-batch engine: prefetching epoch loop, streaming evaluation, ``drain``.

    Subclasses set ``prefetcher`` (over their ``prepare``), ``eval_topology`` and ``chunking``
    (their config has ``eval_nodes`` and ``scratch_dir``), ``loader``, ``sampler`` and (link)
    ``edges`` for :meth:`_sample` (or override it), and implement ``steps_per_epoch``,
    ``_run_step`` and ``_features``.
    """

    prefetcher: Prefetcher[Any]
    eval_topology: Any
    chunking: Chunking
    _closed: bool = False

    # ------------------------------------------------------------------ training
    def _sample(self, epoch: int, step: int) -> MiniBatch:
        """The step's sampled batch, on the stream of the deal's rank.

        A link task's edge batch (its pairs set), else the blocks of the loader's seeds.
        """
        if self.link:
            return self.edges.batch(epoch, step)  # type: ignore[attr-defined]
        loader: Any = self.loader  # type: ignore[attr-defined]
        seeds = loader.batch(epoch, step)
        blocks = node_blocks(self.sampler, self.task, seeds, epoch, step, stream=loader.rank)  # type: ignore[attr-defined]
        return MiniBatch(blocks, seeds, loader.global_count(step))

    def _epoch_start(self) -> None:
        """Reset what the epoch sums (nothing by default)."""

    def _run_step(self, epoch: int, step: int, batch: Any, waited: float) -> StepStats:
        """Train one prepared step (``waited``: seconds spent waiting for its batch)."""
        raise NotImplementedError

    def _epoch_end(self) -> None:
        """Record the epoch's numbers (after its last step of this call)."""

    def run_epoch(
        self, epoch: int, start_step: int = 0, on_step: StepCallback | None = None
    ) -> list[StepStats]:
        """Run steps ``start_step..`` of ``epoch``, the next step prepared in the background."""
        self.module.train()
        self._epoch_start()
        out: list[StepStats] = []
        for step, batch, waited in self.prefetcher.steps(epoch, start_step, self.steps_per_epoch()):
            stats = self._run_step(epoch, step, batch, waited)
            out.append(stats)
            if on_step is not None:
                on_step(step, stats)  # possibly still in flight on the device
        self._epoch_end()
        return resolve_steps(out)  # the epoch's one wait for the device

    def drain(self) -> None:
        """Wait for the batch the prefetch thread may still prepare (after an early stop)."""
        self.prefetcher.drain()

    # ------------------------------------------------------------------ evaluation
    def _features(self, ids: torch.Tensor) -> torch.Tensor:
        """Input rows of any nodes, as training reads them (for evaluation)."""
        raise NotImplementedError

    def evaluate(self) -> dict[str, float]:
        """Accuracy per split and validation loss, summed over ranks (numerators/denominators).

        Streaming layer-wise full-neighbour inference over each rank's node range, topology read
        from ``eval_topology`` and input rows through ``_features`` (collective; see
        :func:`~fleetgnn.engines.inference.streaming_metrics`), ``config.eval_nodes`` choosing
        the last layer's nodes.
        """
        return streaming_metrics(
            self.module,
            self.graph,
            self.eval_topology,
            self._features,
            comm=self.comm,
            device=self.device,
            dtype=self.dtype,
            eval_nodes=self.config.eval_nodes,
            chunking=self.chunking,
            scratch_dir=self.config.scratch_dir,
            same_host=self.ctx.same_host,
            edges=getattr(self, "edge_rows", None),  # the engine's (store-backed) edge rows
        )

    # ------------------------------------------------------------------ state
    def _release(self) -> None:
        """Release what the engine holds besides the prefetch thread (nothing by default)."""

    def close(self) -> None:
        """Stop the prefetch thread, then :meth:`_release` (once)."""
        if self._closed:
            return
        self._closed = True
        self.prefetcher.close()
        self._release()
