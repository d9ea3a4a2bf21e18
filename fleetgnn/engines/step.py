"""One training step for every engine, the gradient sync it uses and the batch prefetcher.

Every engine trains with the same skeleton, :func:`train_step`::

    forward + loss -> zero_grad -> backward -> gradient sync -> clip -> optimizer -> StepStats

and specialises it where engines differ: which data a step reads and which aggregators the model
runs on (the engine's ``forward`` callable, returning a :class:`StepLoss`), where the exchange
happens (inside the aggregators, so inside the forward and the backward), and, for the
``offload`` engine, a backward of its own (chunk by chunk). The phase times are taken here, with
the engine's clock, into the one ``times`` dict every engine reports.

Gradient sync (one policy): after the backward, every parameter's gradient is summed over ranks
with one flat, metered all-reduce (:func:`sync_gradients`); each rank's loss is already divided by
the global number of training nodes of the step, so the sum is the gradient of the global mean
loss. It runs after the backward, not overlapped with it as DDP's buckets are: the ``offload``
engine accumulates parameter gradients over the chunks of every layer (a gradient is final only
when the whole backward has run), and the ``fullgraph`` and ``split`` backward passes run their
own transposed all-to-alls on the training group, which gradient buckets issued from autograd
hooks would interleave with. One policy is kept for every engine.

Gradient clipping (``clip_grad_norm`` of every engine config) runs after the sync, before the
optimizer: every engine's parameters are replicated and their gradients summed over ranks by
:func:`sync_gradients` (``reference``: one process; ``minibatch``, ``split``, ``fullgraph``: after
the step's backward, exchanges included; ``offload``: after the chunked backward of every layer),
so each rank holds the whole gradient and its local 2-norm is the global norm over all ranks'
gradients, the same on every rank with no extra collective.

:class:`Prefetcher` prepares step ``k + 1``'s batch in a background thread while step ``k``
trains (the sampled engines, ``minibatch`` and ``split``); :meth:`Prefetcher.drain` waits for a
batch still in flight after an early stop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import torch

from fleetgnn.engines.common import LossFn, autocast
from fleetgnn.engines.marks import Marks, PendingStepStats, marks_for
from fleetgnn.ops import LOW_PRECISION
from fleetgnn.tasks import NODE_CLASSIFICATION, Task

B = TypeVar("B")


@dataclasses.dataclass(frozen=True)
class StepLoss:
    """What a step's forward gives the skeleton (this rank's part of the step).

    Attributes:
        total: Sum of the per-node losses (a tensor, or a float when the engine's own backward
            builds the graph it differentiates).
        loss: The scalar :func:`train_step` back-propagates (``None`` with an engine backward).
        correct: Correctly classified training nodes (a tensor where the step computed it on
            its device: read after the step, not during it).
        count: Training nodes.
    """

    total: torch.Tensor | float
    loss: torch.Tensor | None
    correct: int | torch.Tensor
    count: int

    @classmethod
    def of(
        cls,
        loss: LossFn,
        logits: torch.Tensor,
        target: torch.Tensor,
        denominator: int,
        task: Task = NODE_CLASSIFICATION,
    ) -> StepLoss:
        """The ``task``'s loss of ``logits`` against ``target`` over ``denominator`` items.

        ``denominator`` is the number of training items (nodes, scored pairs) of the whole step
        (over all ranks), so summing every rank's gradient gives the gradient of the step's
        mean loss.
        """
        if logits.dtype in LOW_PRECISION:  # mixed precision: the loss is float32
            logits = logits.float()
        terms = task.loss_terms(loss, logits, target)
        total = terms.total
        return cls(total, total / max(int(denominator), 1), terms.correct, terms.count)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """How a step's data was prepared before its forward.

    Attributes:
        sample: Seconds spent sampling the step's blocks.
        gather: Seconds spent reading its input rows.
        inline: Seconds of preparation on the step's own critical path, added to ``total``:
            waiting for a prefetched batch, or sampling and gathering inline.
        traffic: Bytes per link kind the preparation moved.
    """

    sample: float = 0.0
    gather: float = 0.0
    inline: float = 0.0
    traffic: Mapping[str, int] = dataclasses.field(default_factory=dict)


NOTHING_PREPARED = Prepared()


def sync_gradients(module: torch.nn.Module, comm: Any) -> None:
    """Sum every parameter's gradient over ranks with one flat, metered all-reduce.

    The gradient sync of every engine (see the module docstring). A parameter without a gradient
    on this rank counts as zeros (it may have one elsewhere); a sparse gradient (an embedding
    table's touched rows) is summed densely, so every rank ends with the whole table's gradient.
    Collective over ``comm`` (a
    multi-rank communicator: :func:`train_step` skips it on one process). Costs one flat copy of
    the gradients; each parameter's gradient is then a view of it.
    """
    params = list(module.parameters())
    # an embedding table's sparse gradient (its touched rows) is summed as its dense form
    grads = [
        torch.zeros_like(p) if p.grad is None else p.grad.to_dense() if p.grad.is_sparse else p.grad
        for p in params
    ]
    flat = torch.cat([g.reshape(-1) for g in grads])
    comm.all_reduce_sum(flat)
    off = 0
    for p in params:
        n = p.numel()
        p.grad = flat[off : off + n].view_as(p)
        off += n


def train_step(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    marks: Marks,
    forward: Callable[[], StepLoss],
    *,
    comm: Any = None,
    meter: Any = None,
    backward: Callable[[StepLoss], None] | None = None,
    prepared: Prepared = NOTHING_PREPARED,
    hidden_comm: Callable[[], float] | None = None,
    clip_grad_norm: float | None = None,
    precision: contextlib.AbstractContextManager[Any] | None = None,
) -> PendingStepStats:
    """One optimisation step: forward and loss, backward, gradient sync, clipping, optimizer.

    Nothing here reads a device value on the host: phase boundaries are marks in the device's
    queue and the step's loss sum and correct count are staged to the host behind them
    (:mod:`fleetgnn.engines.marks`), so on an accelerator the host issues the next step while
    this one runs. The returned stats resolve once the device has passed the step's last mark.

    Args:
        module: The model whose gradients are synchronised (unwrapped).
        optimizer: Over ``module``'s parameters.
        marks: The engine device's phase marks (:func:`~fleetgnn.engines.marks.marks_for`).
        forward: Runs the forward and the loss of this rank's part of the step.
        comm: The engine's metered communicator (``None``: one process, no sync).
        meter: The communicator's traffic meter; what it records during the step is the
            step's traffic besides ``prepared.traffic``.
        backward: The engine's own backward (``None``: ``loss.backward()``).
        prepared: Times and traffic of the step's data preparation.
        hidden_comm: Seconds of exchange inside the forward and backward that were not hidden
            behind compute (read after the backward), charged to ``communication``.
        clip_grad_norm: Clip the synchronised gradients to this global 2-norm before the
            optimizer step (``None``: no clipping); charged to ``optimizer``.
        precision: The mixed-precision context the forward runs in, and an engine
            ``backward`` too (it recomputes forwards); ``None``: none
            (:func:`~fleetgnn.engines.common.autocast`).

    Returns:
        The step's stats (``times`` keys from :data:`~fleetgnn.engines.base.TIME_KEYS`), in
        flight until the device has run the step.
    """
    before = meter.snapshot() if meter is not None else None
    amp = precision if precision is not None else contextlib.nullcontext()
    t0 = marks.mark()
    with amp:
        out = forward()
    t1 = marks.mark()
    optimizer.zero_grad(set_to_none=True)
    if backward is not None:
        with amp:
            backward(out)
    elif out.loss is not None:
        out.loss.backward()
    t2 = marks.mark()
    spans: dict[str, list[tuple[Any, Any]]] = {"forward": [(t0, t1)], "backward": [(t1, t2)]}
    t3 = t2
    if comm is not None and comm.world_size > 1:
        sync_gradients(module, comm)
        t3 = marks.mark()
        spans["communication"] = [(t2, t3)]
    # else one process: nothing to synchronise, and no clock noise charged to communication
    if clip_grad_norm is not None:  # after the sync: every rank clips the same global gradient
        torch.nn.utils.clip_grad_norm_(module.parameters(), clip_grad_norm)
    optimizer.step()
    total = out.total.detach() if isinstance(out.total, torch.Tensor) else out.total
    staged = marks.stage([total, out.correct])
    t4 = marks.mark()
    spans["optimizer"] = [(t3, t4)]
    spans["total"] = [(t0, t4)]
    offsets = {
        "sample": prepared.sample,
        "gather": prepared.gather,
        "communication": hidden_comm() if hidden_comm is not None else 0.0,
        "total": prepared.inline,
    }
    traffic = dict(prepared.traffic)
    if meter is not None:
        for k, v in meter.delta(before).items():
            traffic[k] = traffic.get(k, 0) + v["bytes"]
    return PendingStepStats(marks, staged, out.count, spans, offsets, traffic, t4)


def run_step(engine: Any, forward: Callable[[], StepLoss], **kwargs: Any) -> PendingStepStats:
    """:func:`train_step` with the engine's own module, optimizer, marks, comm and meter.

    ``comm`` and ``meter`` are ``None`` on a single-process engine; ``clip_grad_norm`` and the
    mixed-precision context (``autocast``) are the engine config's. ``kwargs``: ``backward``,
    ``prepared`` or ``hidden_comm`` of :func:`train_step`.
    """
    config = getattr(engine, "config", None)
    return train_step(
        engine.module,
        engine.optimizer,
        marks_for(engine.device, engine.clock),
        forward,
        comm=engine.comm,  # EngineBase declares both (None on one process)
        meter=engine.meter,
        clip_grad_norm=getattr(config, "clip_grad_norm", None),
        precision=autocast(engine.device, config),
        **kwargs,
    )


def _noop() -> None:
    """Nothing (a marker task for :meth:`Prefetcher.drain`)."""


class Prefetcher(Generic[B]):
    """Prepares the next step's batch in one background thread while the current step trains.

    ``prepare(epoch, step)`` builds a step's batch; :meth:`steps` yields the batches of an
    epoch's steps in order, step ``k + 1``'s submitted before step ``k`` is handed out (when
    ``enabled``), so it is prepared while step ``k`` trains (WholeGraph/XGNN's pipeline). The
    thread's work is timed by ``prepare`` itself with the host clock (a device synchronise there
    would wait for the step it overlaps).

    ==============  =================================================================
    device          where the thread's device work runs
    ==============  =================================================================
    CPU (``None``)  in the thread, as any host work
    CUDA            on a side stream of the thread's own: its sampling, gather and
                    copies queue there while the step's kernels run on the current
                    stream; an event recorded after ``prepare`` is waited for by the
                    current stream before the batch is handed out (no host sync), and
                    the batch's device tensors are recorded on the current stream so
                    the allocator keeps them until the step's kernels have read them
    ==============  =================================================================

    Args:
        prepare: Builds the batch of ``(epoch, step)``; runs in the thread (or inline for the
            first step of a call, and for every step when not ``enabled``).
        enabled: Prefetch (else every batch is prepared inline).
        name: The thread's name prefix.
        device: The engine's device (``None``: the CPU).

    Attributes:
        waited_s: Seconds the last :meth:`steps` call waited for batches (inline preparation
            included).
    """

    def __init__(
        self,
        prepare: Callable[[int, int], B],
        *,
        enabled: bool,
        name: str,
        device: torch.device | str | None = None,
    ) -> None:
        self._prepare = prepare
        self.enabled = bool(enabled)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self.waited_s = 0.0
        self.device = torch.device("cpu" if device is None else device)
        cuda = self.enabled and self.device.type == "cuda"
        #: The side stream the thread's device work runs on (CUDA; ``None`` elsewhere).
        self.stream: Any = torch.cuda.Stream(self.device) if cuda else None

    def _prepare_aside(self, epoch: int, step: int) -> tuple[B, Any]:
        """``prepare`` on the side stream, and the event recorded after it (in the thread)."""
        if self.stream is None:
            return self._prepare(epoch, step), None
        with torch.cuda.stream(self.stream):
            batch = self._prepare(epoch, step)
            event = torch.cuda.Event()
            event.record(self.stream)
        return batch, event

    def _hand_over(self, batch: B, event: Any) -> B:
        """Make the current stream wait for a batch prepared aside (nothing on the CPU)."""
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            _record_on(batch, current)
        return batch

    def steps(self, epoch: int, start: int, stop: int) -> Iterator[tuple[int, B, float]]:
        """``(step, batch, waited seconds)`` for steps ``start .. stop - 1`` of ``epoch``."""
        self.waited_s = 0.0
        pending: Future[tuple[B, Any]] | None = None
        for step in range(start, stop):
            t = time.perf_counter()
            if pending is not None:
                batch = self._hand_over(*pending.result())
            else:
                batch = self._prepare(epoch, step)
            waited = time.perf_counter() - t
            pending = (
                self._pool.submit(self._prepare_aside, epoch, step + 1)
                if self.enabled and step + 1 < stop
                else None
            )
            self.waited_s += waited
            yield step, batch, waited

    def drain(self) -> None:
        """Wait until a batch the thread may still prepare is ready (returns at once if none).

        Leaving :meth:`steps` early (an early stop after step ``k``) leaves step ``k + 1``'s
        preparation in flight; it may communicate (on the store's own group), so it must finish
        before the next collectives (evaluation, checkpoint) start. A marker task queued behind
        it runs once it has.
        """
        try:
            self._pool.submit(_noop).result()
        except RuntimeError:  # already shut down: nothing is in flight
            pass

    def close(self) -> None:
        """Stop the thread (after the batch in flight, if any)."""
        self._pool.shutdown(wait=True)


def _record_on(obj: Any, stream: Any, depth: int = 0) -> None:
    """``record_stream(stream)`` on every CUDA tensor of a batch (dataclasses, sequences, maps)."""
    if depth > 8:
        return
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _record_on(getattr(obj, f.name), stream, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _record_on(v, stream, depth + 1)
    elif isinstance(obj, Mapping):
        for v in obj.values():
            _record_on(v, stream, depth + 1)
