"""Link prediction on the ``offload`` engine: the decoder and loss on the host-resident last layer.

The chunked forward writes the last layer's rows ``H^L`` (the embeddings) of the nodes this rank
owns into host memory, as for node classification. The link step then scores, with the model's
decoder, the training pairs whose source this rank owns
(:class:`~fleetgnn.engines.link.OwnedPairs`, the keyed negatives of the reference full-graph
link step), in ``M`` chunks of pairs (``M`` the engine's number of chunks; every rank runs the
same number, so their collectives match):

1. the other endpoints' IDs go to their owners (:func:`~fleetgnn.engines.link.request_rows`:
   one all-to-all of IDs, each distinct node once per chunk);
2. this rank loads from host the distinct rows of ``H^L`` it needs (its sources and the rows
   asked of it), on the device as one leaf of autograd;
3. the asked rows go to the asking ranks in a differentiable all-to-all
   (:func:`~fleetgnn.engines.link.answer_rows`), the pairs are scored
   (:func:`~fleetgnn.engines.link.pair_scores`) and the chunk's loss, divided by every rank's
   number of pairs, is back-propagated at once: the all-to-all's backward returns the asked
   rows' gradients to this rank, and the leaf's gradient is added into host ``G^L``.

``G^L`` (``dL/dH^L`` of every owned node, on host like the engine's other gradient buffers)
then seeds the engine's chunked backward in place of the node-classification loss, and the
decoder's parameter gradients are summed over ranks with the encoder's. Device memory: one
chunk of pairs' rows (``O(pairs x (2 + K) / M)`` rows), never ``[N, D]``.

The pair scoring runs inside the step's forward (it needs the scores for the loss and its
gradient for the seed); the decoder's gradients are held aside while the step's skeleton clears
the parameters' gradients between its forward and backward, and restored before the chunked
backward (:meth:`OffloadLink.restore`).

Evaluation (:meth:`OffloadLink.evaluate`): the eval-mode chunked forward, then
:func:`~fleetgnn.engines.link.owned_link_metrics` over the owned rows left in host memory, in
``M`` chunks of each split's pairs (only a chunk's rows on the device).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fleetgnn.engines.link import (
    OwnedPairs,
    answer_rows,
    owned_link_metrics,
    pair_scores,
    request_rows,
)
from fleetgnn.engines.step import StepLoss
from fleetgnn.tasks import LinkPrediction


class OffloadLink:
    """The link step and evaluation of one rank of an ``offload`` engine.

    Args:
        engine: The :class:`~fleetgnn.engines.offload.OffloadEngine` (its partition book,
            host rows ``H`` and gradients ``G``, device, dtype, communicator and counters).
        task: The link task.
    """

    def __init__(self, engine: Any, task: LinkPrediction) -> None:
        self.engine = engine
        self.task = task
        offsets = torch.from_numpy(np.asarray(engine.book.offsets, dtype=np.int64))
        inv = None if engine.orig_ids is None else np.asarray(engine.book.inv_perm)
        self.pairs = OwnedPairs(task, inv, offsets, engine.rank)
        self._held: list[tuple[torch.nn.Parameter, torch.Tensor | None]] = []

    def __repr__(self) -> str:
        return f"OffloadLink(pairs={int(self.pairs.src.numel())}/{self.pairs.total})"

    def _comm(self) -> Any:
        e = self.engine
        return e.comm if e.world_size > 1 else None

    def loss(self, epoch: int) -> StepLoss:
        """Score this rank's pairs chunk by chunk; fill ``G^L`` and the decoder's gradients.

        Collective (per chunk: an all-to-all of IDs, one of rows and its transpose). Returns
        this rank's summed loss, positives ranked first and positives (a step's
        :class:`~fleetgnn.engines.step.StepLoss` without a graph).
        """
        e, pairs = self.engine, self.pairs
        decoder = e.module.decoder
        comm, dev, dtype = self._comm(), e.device, e.dtype
        h_last, g_last = e.H[-1], e.G[-1]
        g_last.zero_()
        width = int(h_last.shape[1])
        lo = int(pairs.offsets[e.rank])
        total, correct, count = 0.0, 0, 0
        for param in decoder.parameters():  # the skeleton clears gradients after the forward
            param.grad = None
        for part in np.array_split(np.arange(int(pairs.src.numel())), max(e.num_chunks, 1)):
            at = torch.from_numpy(part)
            src, dst = pairs.src[at], pairs.dst[at]
            neg = self.task.sampler.sample(src, dst, epoch)  # [P, K]: one step per epoch
            p, k = neg.shape
            far_ids = torch.cat([pairs.new(dst), pairs.new(neg).reshape(-1)])
            request = request_rows(comm, far_ids, pairs.offsets, dev)
            local = torch.cat([pairs.new(src), request.asked]) - lo
            rows, where = torch.unique(local, return_inverse=True)
            leaf = h_last[rows].to(dev, dtype).requires_grad_()
            e._count("h2d", rows.numel(), width)
            where = where.to(dev)
            with torch.enable_grad():
                far = answer_rows(comm, request, leaf[where[p:]])
                table = torch.cat([leaf[where[:p]], far])
                ar = torch.arange(p, device=dev)
                negs = 2 * p + torch.arange(p * k, device=dev).view(p, k)
                scores = pair_scores(decoder, table, ar, p + ar, negs)
                step = StepLoss.of(e.loss, scores, None, pairs.total, self.task)
                assert step.loss is not None
                step.loss.backward()
            e._live(3 * (leaf.numel() + table.numel()) * e.elem + scores.numel() * e.elem)
            if leaf.grad is not None and rows.numel():
                g_last.index_add_(0, rows, leaf.grad.to(g_last.device, g_last.dtype))
                e._count("d2h", rows.numel(), width, e.elem)
            total += float(step.total.detach())  # type: ignore[union-attr]
            correct += step.correct
            count += step.count
        # the step's skeleton clears every gradient before the backward: hold the decoder's
        self._held = [(p, p.grad) for p in decoder.parameters()]
        return StepLoss(total, None, correct, count)

    def restore(self) -> None:
        """Give the decoder back the gradients :meth:`loss` computed (before the backward)."""
        for p, g in self._held:
            p.grad = g
        self._held = []

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """The link metrics of the owned rows ``H^L`` (after an eval-mode forward; collective)."""
        e = self.engine
        h_own = e.H[-1].to(e.dtype)  # host rows (a copy only under mixed precision)
        return owned_link_metrics(
            self.task,
            e.module.decoder,
            self._comm(),
            h_own,
            self.pairs.offsets,
            self.pairs.inv,
            chunks=e.num_chunks,
            device=e.device,
        )
