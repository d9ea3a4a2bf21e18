"""Metered collectives with autograd: the one door every rank's communication goes through.

A :class:`Communicator` wraps a process group (passed in explicitly) together with a
:class:`~fleetgnn.distributed.traffic.TrafficMeter` and an optional debug mode. Engines never call
``torch.distributed`` directly, so every byte a collective moves is counted, and in debug mode a
mismatched call raises :class:`~fleetgnn.distributed.errors.CollectiveMismatch` on every rank
instead of hanging.

Metering model (what each call records on *this* rank; ``link`` is ``"peer"`` when all ranks are
on one host, else ``"net"``; ``W`` is the world size, ``r`` this rank):

=====================  ==================================================================
call                   recorded
=====================  ==================================================================
``all_to_all``         payload to other ranks: ``sum_{j!=r} send[j] * row_bytes`` bytes
                       on ``link`` in ``#{j!=r: send[j] > 0}`` messages; the self block
                       ``send[r] * row_bytes`` on ``"local"`` (1 message if non-empty).
                       When ``recv_counts`` is not given, the counts exchange first
                       records the same for one int64 per rank (``8 (W-1)`` bytes,
                       ``W-1`` messages on ``link``; 8 bytes, 1 message on ``"local"``).
                       Its backward records the transposed exchange the same way.
``all_reduce_sum``     ring model: ``2 (W-1) * nbytes // W`` bytes, ``2 (W-1)`` messages.
``all_gather_object``  pickled size ``* (W-1)`` bytes, ``W-1`` messages.
``broadcast_object``   on the source rank only: pickled size ``* (W-1)``, ``W-1`` messages.
``barrier``            0 bytes, ``W-1`` messages.
=====================  ==================================================================

Nothing is recorded for ``W == 1`` except ``"local"`` self blocks. The debug-mode shape check
(one ``all_gather_object`` per call) is not metered.

Devices: a communicator serves its rank's device (``comm.device``: where the model and its rows
live) and the CPU (host-side numbers: counters, metric sums, ids of a plan). Every tensor handed
to a collective is checked against those two (always; a comparison per tensor): a tensor on any
other device (another GPU, ``meta``, a CUDA tensor on a CPU rank) raises :class:`DistError` in one
line naming the collective, the calling line, the tensor's device and the expected ones, instead
of a backend's deep error or a hang. A host tensor given to a group without a CPU backend (a
group the caller initialised with NCCL alone) is staged through the device and copied back.
"""

from __future__ import annotations

import math
import os
import pickle
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from fleetgnn.distributed.errors import CollectiveMismatch, DistError
from fleetgnn.distributed.traffic import TrafficMeter

Counts = Sequence[int] | torch.Tensor


def served_devices(backend: str, device: torch.device) -> frozenset[str]:
    """Device types whose tensors a process group of ``backend`` moves for a rank on ``device``.

    ==========================  ==================================================
    backend                     served
    ==========================  ==================================================
    ``"gloo"``                  ``cpu``; and ``cuda`` on a CUDA rank (the shared-GPU
                                mode: gloo stages CUDA tensors through host copies)
    ``"nccl"``                  ``cuda``
    ``"cpu:gloo,cuda:nccl"``    ``cpu`` and ``cuda``
    ==========================  ==================================================
    """
    backend = str(backend)
    if ":" in backend:
        return frozenset(part.split(":", 1)[0].strip() for part in backend.split(","))
    if backend == "nccl":
        return frozenset({"cuda"})
    return frozenset({"cpu", device.type})  # gloo (CUDA tensors only on a CUDA rank), others


def _caller() -> str:
    """``file:line (function)`` of the first frame outside this module and torch."""
    f = sys._getframe(1)
    here = os.path.abspath(__file__)
    while f is not None and (
        os.path.abspath(f.f_code.co_filename) == here
        or f"{os.sep}torch{os.sep}" in f.f_code.co_filename
    ):
        f = f.f_back
    if f is None:
        return "<unknown>"
    path = f.f_code.co_filename
    cut = path.rfind(f"{os.sep}fleetgnn{os.sep}")
    return f"{path[cut + 1 :] if cut >= 0 else path}:{f.f_lineno} ({f.f_code.co_name})"


class AllToAllHandle:
    """An all-to-all in flight, returned by ``Communicator.all_to_all(..., async_op=True)``.

    Attributes:
        recv_counts: Rows this rank receives from each rank (known at launch).
    """

    def __init__(self, out: torch.Tensor, recv_counts: list[int], work: Any, keep: Any) -> None:
        self._out = out
        self.recv_counts = recv_counts
        self._work = work
        self._keep = keep  # input buffer, alive until the exchange completes

    def is_completed(self) -> bool:
        """Whether the exchange has finished (non-blocking)."""
        return self._work is None or bool(self._work.is_completed())

    def wait(self) -> torch.Tensor:
        """Block until the exchange finished and return the received rows (autograd-connected)."""
        if self._work is not None:
            self._work.wait()
            self._work = None
            self._keep = None
        return self._out

    def __repr__(self) -> str:
        state = "done" if self._work is None else "in flight"
        return f"AllToAllHandle(recv_counts={self.recv_counts}, {state})"


class _AllToAll(torch.autograd.Function):
    """Uneven all-to-all whose backward is the transposed exchange (splits swapped)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        comm: Communicator,
        send: list[int],
        recv: list[int],
        box: list | None,
    ) -> torch.Tensor:
        ctx.comm, ctx.send, ctx.recv = comm, send, recv
        out, work = comm._exchange(x.detach(), send, recv, "all_to_all", async_op=box is not None)
        if box is not None:
            box.append(work)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        comm: Communicator = ctx.comm
        g, _ = comm._exchange(grad.contiguous(), ctx.recv, ctx.send, "all_to_all.backward")
        return g, None, None, None, None


class Communicator:
    """Collectives over one explicit process group, metered, with autograd and a debug mode.

    Every method is a collective: all ranks of the group must call the same methods in the same
    order (debug mode verifies this and the shapes/counts before each call).

    Args:
        group: The process group (``None``: the default group, which must be initialised).
        rank: This process's rank within ``group``.
        world_size: Number of ranks in ``group``.
        meter: Where traffic is recorded (a fresh meter if None).
        debug: Verify op name, call number, dtype, shapes and counts across ranks before each
            collective (one extra ``all_gather_object`` per call) and raise
            :class:`CollectiveMismatch` on every rank on disagreement.
        same_host: All ranks on one host: traffic to other ranks is ``"peer"``, else ``"net"``.
        device: This rank's device (``None``: the current CUDA device for a group with NCCL,
            else the CPU). Collectives take tensors on it or on the CPU (module doc).

    Raises:
        DistError: ``torch.distributed`` is not initialised, or ``rank``/``world_size`` do not
            match the group.
    """

    def __init__(
        self,
        group: dist.ProcessGroup | None,
        *,
        rank: int,
        world_size: int,
        meter: TrafficMeter | None = None,
        debug: bool = False,
        same_host: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise DistError(
                "Communicator needs an initialised torch.distributed process group; call "
                "fleetgnn.distributed.init() first (or run under torchrun / "
                "fleetgnn.distributed.launch)."
            )
        world_size, rank = int(world_size), int(rank)
        actual_ws = dist.get_world_size(group)
        actual_rank = dist.get_rank(group)
        if world_size != actual_ws or rank != actual_rank:
            raise DistError(
                f"Communicator(rank={rank}, world_size={world_size}) does not match the process "
                f"group (rank {actual_rank} of {actual_ws}); pass the rank within the group "
                "(dist.get_rank(group)) and its size."
            )
        self._group: dist.ProcessGroup | None = group
        self._destroyed = False
        self.rank = rank
        self.world_size = world_size
        self.meter = meter if meter is not None else TrafficMeter()
        self.debug = bool(debug)
        self.same_host = bool(same_host)
        self.backend = str(dist.get_backend(group))
        if device is not None:
            self.device = torch.device(device)
            if self.device.type == "cuda" and self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
        elif "nccl" in self.backend:
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.serves = served_devices(self.backend, self.device)
        self._seq = 0
        self._owns_group = False

    @property
    def group(self) -> dist.ProcessGroup | None:
        """The process group (``None``: the default group).

        Raises:
            DistError: :meth:`destroy` destroyed it.
        """
        if self._destroyed:
            raise DistError(
                "this communicator's process group was destroyed (Communicator.destroy); "
                "create a new one"
            )
        return self._group

    @property
    def link(self) -> str:
        """Link kind of traffic to other ranks: ``"peer"`` on one host, else ``"net"``."""
        return "peer" if self.same_host else "net"

    def __repr__(self) -> str:
        return (
            f"Communicator(rank={self.rank}, world_size={self.world_size}, "
            f"backend={self.backend!r}, device={str(self.device)!r}, link={self.link!r}, "
            f"debug={self.debug})"
        )

    # ------------------------------------------------------------------ devices
    def check_device(self, op: str, t: torch.Tensor) -> None:
        """Raise unless ``t`` is on this rank's device or the CPU (see the module doc).

        Raises:
            DistError: One line naming the collective ``op``, the calling line, ``t``'s device
                and the devices this communicator takes.
        """
        dev = t.device
        if dev.type == "cpu" or dev == self.device:
            return
        takes = "the CPU" if self.device.type == "cpu" else f"{self.device} or the CPU"
        raise DistError(
            f"{op}: a tensor on {dev} reached rank {self.rank}'s communicator, which takes "
            f"tensors on {takes} (backend {self.backend!r}); called from "
            f"{_caller()}. Build host-side numbers on the CPU and device rows on comm.device."
        )

    def _wire(self, op: str, t: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """``(tensor to hand to torch.distributed, staged)`` for ``t``, after the device check.

        A host tensor on a group without a CPU backend is copied to the rank's device (staged);
        everything else goes as it is.
        """
        self.check_device(op, t)
        if t.device.type in self.serves:
            return t, False
        return t.to(self.device), True

    # ------------------------------------------------------------------ all-to-all
    def all_to_all(
        self,
        x: torch.Tensor,
        send_counts: Counts,
        *,
        recv_counts: Counts | None = None,
        async_op: bool = False,
    ) -> tuple[torch.Tensor, list[int]] | AllToAllHandle:
        """Uneven all-to-all of rows: rank ``r`` sends rows ``x[o_j : o_j + send_counts[j]]`` to j.

        Rows are grouped by destination in rank order (``o_j = sum(send_counts[:j])``); the output
        holds the rows received from rank 0, then rank 1, ... Collective; communicates once for the
        counts (skipped when ``recv_counts`` is given) and once for the rows, with
        ``dist.all_to_all_single``. Differentiable: the backward sends the gradient of every
        received row back to its sender (the same exchange with the splits swapped); it is a
        collective too, so every rank must backpropagate through it (``x.requires_grad`` must agree
        across ranks). Memory: one output buffer of ``sum(recv_counts)`` rows.

        Shapes:
            - x: ``[sum(send_counts), *F]``
            - output: ``[sum(recv_counts), *F]``

        Args:
            x: Rows to send, grouped by destination rank.
            send_counts: Rows for each rank (length ``world_size``, >= 0, summing to ``len(x)``).
            recv_counts: Rows expected from each rank, when already known (skips the counts
                exchange; must equal what the senders send).
            async_op: Return an :class:`AllToAllHandle` at once; ``handle.wait()`` returns the
                output. Do other work in between (overlap); do not touch ``x`` until then.

        Returns:
            ``(out, recv_counts)``, or an :class:`AllToAllHandle` when ``async_op``.

        Raises:
            DistError: Bad counts or input.
            CollectiveMismatch: (debug mode) ranks disagree on the call.
        """
        if isinstance(x, torch.Tensor):
            self.check_device("all_to_all", x)  # before any rank communicates
        try:
            send, recv = self._check_a2a(x, send_counts, recv_counts)
            error = None
        except DistError as e:
            if not self.debug:
                raise
            send, recv, error = None, None, str(e)
        if self.debug:
            self.verify(
                "all_to_all",
                error=error,
                dtype=str(getattr(x, "dtype", None)),
                trailing=list(getattr(x, "shape", (0,))[1:]),
                send_counts=send,
                recv_counts=recv,
                requires_grad=bool(getattr(x, "requires_grad", False) and torch.is_grad_enabled()),
            )
        if send is None:  # unreachable: verify raised on the error above
            raise DistError(str(error))
        if recv is None:
            recv = self.exchange_counts(send)
        x = x.contiguous()
        if async_op:
            box: list = []
            out = _AllToAll.apply(x, self, send, recv, box)
            return AllToAllHandle(out, recv, box[0], x)
        return _AllToAll.apply(x, self, send, recv, None), recv

    def _check_a2a(
        self, x: torch.Tensor, send_counts: Counts, recv_counts: Counts | None
    ) -> tuple[list[int], list[int] | None]:
        if not isinstance(x, torch.Tensor) or x.dim() < 1:
            raise DistError(
                f"all_to_all: 'x' must be a tensor with at least 1 dimension (rows), got "
                f"{type(x).__name__} with shape {tuple(getattr(x, 'shape', ()))}; use "
                "x.reshape(-1, 1) for a vector of scalars."
            )
        send = self._counts("send_counts", send_counts)
        if sum(send) != x.shape[0]:
            raise DistError(
                f"all_to_all: sum(send_counts) = {sum(send)} but 'x' has {x.shape[0]} rows "
                f"(send_counts={send}); the counts must partition the rows of x by destination."
            )
        recv = None if recv_counts is None else self._counts("recv_counts", recv_counts)
        return send, recv

    def exchange_counts(self, send_counts: Counts) -> list[int]:
        """All-to-all of one integer per rank: returns what every rank sends to this rank.

        Collective (one ``all_to_all_single`` of ``world_size`` int64, host-side: on the CPU
        where the group has a CPU backend, else through the device).
        """
        send = self._counts("send_counts", send_counts)
        t, _ = self._wire("exchange_counts", torch.tensor(send, dtype=torch.int64))
        out = torch.empty_like(t)
        self._record_a2a([1] * self.world_size, 8)
        dist.all_to_all_single(out, t, group=self.group)
        return [int(v) for v in out.tolist()]

    def _exchange(
        self,
        x: torch.Tensor,
        send: list[int],
        recv: list[int],
        op: str,
        *,
        async_op: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """The metered ``all_to_all_single`` (no validation, no autograd)."""
        if self.debug and op != "all_to_all":  # the forward was verified by all_to_all()
            self.verify(
                op,
                dtype=str(x.dtype),
                trailing=list(x.shape[1:]),
                send_counts=send,
                recv_counts=recv,
                requires_grad=False,
            )
        wire, staged = self._wire(op, x)
        out = torch.empty((sum(recv), *x.shape[1:]), dtype=x.dtype, device=wire.device)
        row_bytes = x.element_size() * math.prod(x.shape[1:])
        self._record_a2a(send, row_bytes)
        work = dist.all_to_all_single(
            out,
            wire,
            output_split_sizes=recv,
            input_split_sizes=send,
            group=self.group,
            async_op=async_op and not staged,
        )
        if staged:  # finished above; back to the host like the input
            return out.to(x.device), None
        return out, work

    def _record_a2a(self, send: Sequence[int], row_bytes: int) -> None:
        r = self.rank
        remote = sum(c for j, c in enumerate(send) if j != r)
        msgs = sum(1 for j, c in enumerate(send) if j != r and c > 0)
        if remote or msgs:
            self.meter.record(self.link, remote * row_bytes, msgs)
        if send[r] > 0:
            self.meter.record("local", send[r] * row_bytes, 1)

    # ------------------------------------------------------------------ other collectives
    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum ``t`` over ranks, in place; returns ``t``. Collective; not differentiable.

        Aggregate metrics as sums of numerators and denominators, not averages of averages.
        """
        if not isinstance(t, torch.Tensor):
            raise DistError(
                f"all_reduce_sum: expected a tensor, got {type(t).__name__}; wrap numbers in "
                "torch.tensor([...], dtype=torch.float64)."
            )
        wire, staged = self._wire("all_reduce_sum", t)
        if self.debug:
            self.verify("all_reduce_sum", dtype=str(t.dtype), shape=list(t.shape))
        w = self.world_size
        if w > 1:
            self.meter.record(
                self.link, 2 * (w - 1) * t.numel() * t.element_size() // w, 2 * (w - 1)
            )
        dist.all_reduce(wire, op=dist.ReduceOp.SUM, group=self.group)
        if staged:
            t.copy_(wire)
        return t

    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``t`` over ranks in place with ``op`` (``"sum"``, ``"max"``, ``"min"``).

        Collective; not differentiable. Metered like :meth:`all_reduce_sum` (ring model).

        Returns:
            ``t``.
        """
        ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        if op not in ops:
            raise DistError(f"all_reduce: 'op' must be one of {', '.join(ops)} (got {op!r})")
        if not isinstance(t, torch.Tensor):
            raise DistError(f"all_reduce: expected a tensor, got {type(t).__name__}")
        wire, staged = self._wire("all_reduce", t)
        if self.debug:
            self.verify("all_reduce", reduce=op, dtype=str(t.dtype), shape=list(t.shape))
        w = self.world_size
        if w > 1:
            self.meter.record(
                self.link, 2 * (w - 1) * t.numel() * t.element_size() // w, 2 * (w - 1)
            )
        dist.all_reduce(wire, op=ops[op], group=self.group)
        if staged:
            t.copy_(wire)
        return t

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``t`` (same shape and dtype on every rank), indexed by rank. Collective.

        Metered: ``nbytes * (W-1)`` bytes in ``W-1`` messages (the rows this rank receives).
        """
        wire, staged = self._wire("all_gather", t)
        if self.debug:
            self.verify("all_gather", dtype=str(t.dtype), shape=list(t.shape))
        if self.world_size == 1:
            return [t]
        self.meter.record(
            self.link, t.numel() * t.element_size() * (self.world_size - 1), self.world_size - 1
        )
        out = [torch.empty_like(wire) for _ in range(self.world_size)]
        dist.all_gather(out, wire.contiguous(), group=self.group)
        return [o.to(t.device) for o in out] if staged else out

    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Rank ``src``'s ``t`` into ``t`` on every rank (in place); returns ``t``. Collective.

        Metered on the source rank: ``nbytes * (W-1)`` bytes in ``W-1`` messages.
        """
        wire, staged = self._wire("broadcast", t)
        if self.debug:
            self.verify("broadcast", src=int(src), dtype=str(t.dtype), shape=list(t.shape))
        if self.world_size > 1:
            if self.rank == src:
                self.meter.record(
                    self.link,
                    t.numel() * t.element_size() * (self.world_size - 1),
                    self.world_size - 1,
                )
            global_src = src if self.group is None else dist.get_global_rank(self.group, src)
            dist.broadcast(wire, src=global_src, group=self.group)
            if staged:
                t.copy_(wire)
        return t

    def new_group(
        self, backend: str | None = None, meter: TrafficMeter | None = None
    ) -> Communicator:
        """A communicator over a NEW process group of the same ranks.

        ``meter``: where it records (default: this communicator's meter). Collective (every rank
        of the default group must call it). Use it for traffic that runs concurrently with this
        group's (e.g. a prefetch thread), and :meth:`destroy` it when done. With one rank it
        returns a communicator over this group (nothing is created).
        """
        if self.world_size == 1:
            return Communicator(
                self.group,
                rank=self.rank,
                world_size=1,
                meter=meter or self.meter,
                debug=self.debug,
                same_host=self.same_host,
                device=self.device,
            )
        group = dist.new_group(backend=backend or self.backend)
        child = Communicator(
            group,
            rank=self.rank,
            world_size=self.world_size,
            meter=meter or self.meter,
            debug=self.debug,
            same_host=self.same_host,
            device=self.device,
        )
        child._owns_group = True
        return child

    def host_group(self, hosts: Sequence[int], meter: TrafficMeter | None = None) -> Communicator:
        """A communicator over a NEW process group of the ranks on this rank's host.

        ``hosts[r]`` is the host index of rank ``r`` of this group, the same sequence on every
        rank (e.g. from :meth:`~fleetgnn.distributed.DistContext.hosts`). Collective over the
        default group: every rank creates every host's group, in host order
        (``torch.distributed.new_group`` must be called by all ranks), and keeps its own. The
        result has ``same_host=True`` (traffic inside it is ``"peer"``) and records into
        ``meter`` (default: this communicator's); :meth:`destroy` it when done.

        Example: ``hosts = (0, 0, 1, 1)`` gives ranks 0 and 1 a group of ``{0, 1}`` (their
        ranks 0 and 1 in it) and ranks 2 and 3 one of ``{2, 3}``.

        Raises:
            DistError: ``hosts`` does not have one integer per rank.
        """
        hosts = [int(h) for h in hosts]
        if len(hosts) != self.world_size:
            raise DistError(
                f"host_group: 'hosts' needs one host index per rank ({self.world_size}), got "
                f"{len(hosts)}."
            )
        mine = None
        for host in sorted(set(hosts)):
            members = [r for r, h in enumerate(hosts) if h == host]
            ranks = [
                r if self.group is None else dist.get_global_rank(self.group, r) for r in members
            ]
            group = dist.new_group(ranks=ranks, backend=self.backend)
            if host == hosts[self.rank]:
                mine = (group, members)
        assert mine is not None  # this rank's own host is among the hosts
        group, members = mine
        child = Communicator(
            group,
            rank=members.index(self.rank),
            world_size=len(members),
            meter=meter or self.meter,
            debug=self.debug,
            same_host=True,
            device=self.device,
        )
        child._owns_group = True
        return child

    def destroy(self) -> None:
        """Destroy the group :meth:`new_group` or :meth:`host_group` created (else a no-op).

        The communicator lets go of the group's object, so the group's worker threads stop now,
        not at interpreter exit (where gloo's can abort the process); a collective on it after
        this raises :class:`DistError`.
        """
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group(self._group)
            self._owns_group = False
            self._group, self._destroyed = None, True

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), indexed by rank. Collective."""
        if self.debug:
            self.verify("all_gather_object")
        if self.world_size > 1:
            size = len(pickle.dumps(obj))
            self.meter.record(self.link, size * (self.world_size - 1), self.world_size - 1)
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank (others pass anything, e.g. None). Collective."""
        src = int(src)
        if not 0 <= src < self.world_size:
            raise DistError(
                f"broadcast_object: src={src} is not a rank of this group [0, {self.world_size})."
            )
        if self.debug:
            self.verify("broadcast_object", src=src)
        if self.rank == src and self.world_size > 1:
            size = len(pickle.dumps(obj))
            self.meter.record(self.link, size * (self.world_size - 1), self.world_size - 1)
        box = [obj if self.rank == src else None]
        global_src = src if self.group is None else dist.get_global_rank(self.group, src)
        dist.broadcast_object_list(box, src=global_src, group=self.group)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank reached this call. Collective."""
        if self.debug:
            self.verify("barrier")
        if self.world_size > 1:
            self.meter.record(self.link, 0, self.world_size - 1)
        dist.barrier(group=self.group)

    # ------------------------------------------------------------------ validation
    def _counts(self, what: str, counts: Counts) -> list[int]:
        if isinstance(counts, torch.Tensor):
            counts = counts.tolist()
        try:
            out = [int(c) for c in counts]
        except (TypeError, ValueError) as e:
            raise DistError(
                f"{what} must be a sequence of {self.world_size} integers, got {counts!r}."
            ) from e
        if len(out) != self.world_size or any(c < 0 for c in out):
            raise DistError(
                f"{what}={out} must have one count >= 0 per rank (world_size={self.world_size}); "
                "pass zeros for ranks that get nothing."
            )
        return out

    def verify(self, op: str, **view: Any) -> None:
        """Debug mode: gather every rank's view of this call and raise on disagreement.

        Collective in debug mode (one ``all_gather_object``, not metered); a no-op otherwise.
        Callers building their own collective protocols (e.g. a two-sided gather) call it with a
        per-call view; a view with a non-empty ``error`` makes every rank raise.

        Args:
            op: Name of the operation about to run.
            **view: What this rank is about to do (dtype, shapes, counts, ``error``).

        Raises:
            CollectiveMismatch: On every rank, listing every rank's view, if they disagree.
        """
        if not self.debug:
            return
        self._seq += 1
        mine = {"op": op, "call": self._seq, **view}
        views: list[Any] = [None] * self.world_size
        dist.all_gather_object(views, mine, group=self.group)
        problems = check_views(views)
        if problems:
            lines = [f"collective mismatch (debug mode) at call #{self._seq} on rank {self.rank}:"]
            lines += [f"  rank {r}: {_fmt_view(v)}" for r, v in enumerate(views)]
            lines += [f"  problem: {p}" for p in problems]
            lines.append(
                "Fix: every rank must make the same collective calls in the same order with "
                "matching dtypes, trailing shapes and counts."
            )
            raise CollectiveMismatch("\n".join(lines), views)


def _fmt_view(v: dict) -> str:
    rest = ", ".join(f"{k}={v[k]}" for k in v if k not in ("op", "call") and v[k] is not None)
    return f"{v.get('op')} (call #{v.get('call')}){': ' + rest if rest else ''}"


def check_views(views: Sequence[dict]) -> list[str]:
    """Problems that make the ranks' views of one collective call incompatible (empty if none).

    Args:
        views: One dict per rank with ``op`` and ``call`` and, depending on the op, ``dtype``,
            ``trailing``/``shape``, ``send_counts``, ``recv_counts`` (or None), ``requires_grad``,
            ``src``.
    """
    problems: list[str] = []
    ws = len(views)

    def differ(key: str) -> bool:
        return len({repr(v.get(key)) for v in views}) > 1

    def listing(key: str) -> str:
        return ", ".join(f"rank {r}: {v.get(key)}" for r, v in enumerate(views))

    errors = [f"rank {r}: {v['error']}" for r, v in enumerate(views) if v.get("error")]
    if errors:
        return [f"invalid arguments ({'; '.join(errors)})"]
    if differ("op"):
        return [f"ranks call different collectives ({listing('op')})"]
    if differ("call"):
        return [f"ranks are at different call numbers ({listing('call')}); a rank skipped a call"]
    for key in ("dtype", "trailing", "shape", "src", "requires_grad"):
        if differ(key):
            problems.append(f"{key} differs across ranks ({listing(key)})")
    if all(v.get("send_counts") is not None for v in views):
        for j, vj in enumerate(views):
            recv = vj.get("recv_counts")
            if recv is None:
                continue
            for i, vi in enumerate(views):
                sent = vi["send_counts"][j] if len(vi["send_counts"]) == ws else None
                if sent != recv[i]:
                    problems.append(
                        f"rank {i} sends {sent} rows to rank {j} but rank {j} expects {recv[i]}"
                    )
    return problems
