"""Process-group setup: one call that works under torchrun, under ``launch`` and in a plain process.

``init()`` reads the launcher's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``: set by ``torchrun`` and by
:func:`fleetgnn.distributed.launch`) and initialises ``torch.distributed`` with ``env://``.
When ``MASTER_ADDR`` is a loopback address (every rank on this host, as under
:func:`~fleetgnn.distributed.launch`), rank 0's store listens on that address only
(:func:`loopback_tcp_store`): a plain ``TCPStore`` listens on every interface, and its clients
are unauthenticated and exchange pickled objects. Other addresses (multi-host ``torchrun``) are
left to torch: the store listens on ``MASTER_PORT`` of every interface of that host.
Without those variables it creates a real one-rank group through a
:class:`torch.distributed.FileStore` in a private temporary directory (no port, no network), so
single-process code runs the same
collectives as a multi-process job.

Devices and backends (the device contract; ``device`` picks, ``backend`` may force):

- ``device="cpu"``: every rank on the CPU, a ``gloo`` group (also where CUDA exists).
- ``device="cuda"`` with a GPU per local rank: rank on ``cuda:LOCAL_RANK``, a
  ``"cpu:gloo,cuda:nccl"`` group: device tensors go through NCCL, host tensors (counters,
  objects, plans) through gloo.
- ``device="cuda"`` with fewer GPUs than local ranks (the shared-GPU mode, for tests and small
  machines): rank on ``cuda:LOCAL_RANK % GPUs``, a ``gloo`` group (NCCL refuses two ranks on one
  device; gloo takes CUDA tensors, staging them through pinned host copies).
- ``device="auto"`` (or ``None``): ``"cuda"`` where CUDA is available, else ``"cpu"``.

``backend="gloo"`` with ``device=None`` means ``device="cpu"``; ``backend="nccl"`` means
``device="cuda"`` and refuses the shared-GPU mode. Every collective call site builds its tensors
on purpose: host-side numbers on the CPU, device rows on ``ctx.device``; the
:class:`~fleetgnn.distributed.comm.Communicator` checks each tensor's device against those two.

The returned :class:`DistContext` is the only handle to the group: pass ``ctx.group`` (or
``ctx.communicator()``) explicitly to everything that communicates. ``ctx.group`` is ``None`` for
the default group (what torch's collectives read as it): nothing of fleetgnn's holds the default
group's object, so :func:`destroy` frees it, and its worker threads stop, while the interpreter
runs. A group object alive at interpreter exit (an engine in a reference cycle holding it) let
gloo's threads abort the process ("terminate called without an active exception") in a
measurable share of two-process runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import shutil
import socket
import tempfile
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from fleetgnn.distributed.comm import Communicator
from fleetgnn.distributed.errors import DistError
from fleetgnn.distributed.traffic import TrafficMeter

#: Environment variables a launcher sets for every worker.
LAUNCH_ENV: tuple[str, ...] = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
BACKENDS: tuple[str, ...] = ("gloo", "nccl")
#: What ``device`` may say: a device type, or ``"auto"`` (CUDA where available, else CPU).
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
#: The process group of a rank that has a GPU of its own: device tensors on NCCL, host on gloo.
HYBRID_BACKEND = "cpu:gloo,cuda:nccl"


@dataclasses.dataclass(frozen=True)
class DistContext:
    """This process's place in the job and its process group.

    Example (2 hosts x 2 GPUs, ``nccl``):

    ====  ==========  ===========  ================  ========
    rank  local_rank  world_size   local_world_size  device
    ====  ==========  ===========  ================  ========
    0     0           4            2                 cuda:0
    1     1           4            2                 cuda:1
    2     0           4            2                 cuda:0
    3     1           4            2                 cuda:1
    ====  ==========  ===========  ================  ========

    Attributes:
        rank: Global rank.
        world_size: Number of ranks.
        local_rank: Rank on this host (selects the GPU).
        local_world_size: Ranks on this host.
        backend: ``"gloo"`` or ``"nccl"`` (a group with NCCL for device tensors and gloo for
            host tensors).
        device: Where this rank's model, data and collective buffers live (``cuda:<local_rank>``
            with a GPU per rank, ``cuda:<local_rank % GPUs>`` when ranks share GPUs, else cpu).
        group: The process group; ``None`` for the default group (the one :func:`init` created
            or found).
        owns_group: Whether :func:`destroy` tears the group down (False when it already existed).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: torch.device
    group: dist.ProcessGroup | None = dataclasses.field(repr=False)
    owns_group: bool = True
    store_dir: str | None = dataclasses.field(default=None, repr=False)

    @property
    def shares_device(self) -> bool:
        """Whether several ranks of this host share one CUDA device (gloo collectives)."""
        return self.device.type == "cuda" and self.backend == "gloo"

    @property
    def same_host(self) -> bool:
        """Whether every rank runs on this host."""
        return self.local_world_size == self.world_size

    def hosts(self, comm: Communicator) -> tuple[int, ...]:
        """The host index of every rank, ``hosts[r]`` (hosts numbered from 0 in rank order).

        On one host (:attr:`same_host`): all zeros, without communicating. Across hosts: one
        ``all_gather_object`` of ``(local_rank, local_world_size)`` through ``comm`` (a
        communicator over this context's ranks; collective), read by :func:`host_layout`.

        Raises:
            DistError: ``comm`` does not span this context's ranks.
        """
        if comm.world_size != self.world_size or comm.rank != self.rank:
            raise DistError(
                f"DistContext.hosts: the communicator (rank {comm.rank} of {comm.world_size}) "
                f"must span this context's ranks (rank {self.rank} of {self.world_size})."
            )
        if self.same_host:
            return (0,) * self.world_size
        return host_layout(comm.all_gather_object((self.local_rank, self.local_world_size)))

    def communicator(
        self, meter: TrafficMeter | None = None, *, debug: bool = False
    ) -> Communicator:
        """A :class:`Communicator` over this context's group (``peer`` links if on one host)."""
        return Communicator(
            self.group,
            rank=self.rank,
            world_size=self.world_size,
            meter=meter,
            debug=debug,
            same_host=self.same_host,
            device=self.device,
        )


def host_layout(local: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """Host index of every rank from each rank's ``(local_rank, local_world_size)``.

    Launchers (torchrun, :func:`~fleetgnn.distributed.launch`) give every host a contiguous
    block of ranks whose local ranks run ``0..L-1``; a new host starts at every local rank 0:

    ====  ==========  ================  ====
    rank  local_rank  local_world_size  host
    ====  ==========  ================  ====
    0     0           2                 0
    1     1           2                 0
    2     0           1                 1
    3     0           1                 2
    ====  ==========  ================  ====

    Any other layout is not guessed at: every rank is then taken to be a host of its own
    (nothing is assumed shared).

    Args:
        local: ``(local_rank, local_world_size)`` of ranks ``0..W-1``.

    Returns:
        ``hosts`` with ``hosts[r]`` the host of rank ``r``.
    """
    hosts: list[int] = []
    start, size = 0, 0
    for rank, (local_rank, local_size) in enumerate(local):
        if local_rank == 0:
            if rank != start + size:  # the previous host's block is incomplete
                return tuple(range(len(local)))
            start, size = rank, int(local_size)
        if size < 1 or local_size != size or local_rank != rank - start or local_rank >= size:
            return tuple(range(len(local)))
        hosts.append(0 if not hosts else hosts[-1] + int(local_rank == 0))
    if local and len(local) != start + size:
        return tuple(range(len(local)))
    return tuple(hosts)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address literal (``127.x.y.z``, ``::1``) or ``localhost``."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[] ")).is_loopback
    except ValueError:
        return False


def loopback_tcp_store(host: str, port: int, *, is_master: bool, **kwargs: Any) -> dist.TCPStore:
    """A ``TCPStore`` at ``host:port``; its server (``is_master``) listens on loopback only.

    A ``TCPStore`` server binds every interface whatever ``host`` says. Here the server's socket
    is bound to the loopback address ``host`` names (port 0: one the OS picks, read back) and
    handed to the store (``master_listen_fd``), so nothing outside this host can connect.

    Args:
        host: A loopback address (see :func:`is_loopback`).
        port: The port; 0 lets the OS pick one for a server (read it back from ``.port``).
        is_master: Host the server (else connect to it as a client).
        **kwargs: Passed to ``TCPStore`` (``world_size``, ``timeout``, ``multi_tenant``, ...).

    Raises:
        DistError: ``host`` is not a loopback address.
    """
    if not is_loopback(host):
        raise DistError(f"loopback_tcp_store: {host!r} is not a loopback address")
    if not is_master or kwargs.get("master_listen_fd") is not None:
        return dist.TCPStore(host, port, is_master=is_master, **kwargs)
    family, _, _, _, addr = socket.getaddrinfo(
        "127.0.0.1" if host.strip().lower() == "localhost" else host.strip("[] "),
        port,
        type=socket.SOCK_STREAM,
    )[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(socket.SOMAXCONN)
        bound = int(sock.getsockname()[1])
    except OSError:
        sock.close()
        raise
    fd = sock.detach()  # the store owns the socket from here on
    try:
        return dist.TCPStore(host, bound, is_master=True, master_listen_fd=fd, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def _env_int(name: str) -> int:
    raw = os.environ[name]
    try:
        return int(raw)
    except ValueError as e:
        raise DistError(
            f"environment variable {name}={raw!r} is not an integer; it is set by the launcher "
            "(torchrun); unset it to run as a single process."
        ) from e


def auto_device_type() -> str:
    """What ``device="auto"`` means here: ``"cuda"`` where CUDA is available, else ``"cpu"``.

    The one place that decides it, so ``init``, the engines and ``config.yaml`` agree.
    """
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device_type(device: str | None, backend: str | None = None) -> str:
    """``"cpu"`` or ``"cuda"``: what ``init(device=..., backend=...)`` runs on, checked here.

    Raises:
        DistError: An unknown device or backend, a combination that contradicts itself
            (``device="cpu"`` with ``backend="nccl"``), or CUDA asked for where it is not
            available.
    """
    if backend is not None and backend not in BACKENDS:
        raise DistError(
            f"init(backend={backend!r}): valid backends are {', '.join(BACKENDS)} or None "
            "(chosen from the device)."
        )
    if device is None:
        device = {"gloo": "cpu", "nccl": "cuda"}.get(backend or "", "auto")
    kind = str(device).split(":", 1)[0]
    if kind not in DEVICES:
        raise DistError(
            f"init(device={device!r}): valid devices are {', '.join(DEVICES)} (a rank's GPU is "
            "its local rank's; 'auto' takes CUDA where it is available)."
        )
    if kind == "auto":
        kind = auto_device_type()
    if kind == "cpu" and backend == "nccl":
        raise DistError(
            "init(device='cpu', backend='nccl'): NCCL moves CUDA tensors only; use "
            "backend='gloo' (or None) on the CPU."
        )
    if kind == "cuda" and not torch.cuda.is_available():
        what = (
            "backend='nccl'"
            if backend == "nccl" and device in (None, "cuda")
            else (f"device={device!r}")
        )
        raise DistError(
            f"init({what}) needs CUDA, which is not available here; use device='cpu' "
            "(backend='gloo') to run on the CPU."
        )
    return kind


def _pg_backend(kind: str, backend: str | None, local_world_size: int) -> str:
    """The ``torch.distributed`` backend string for ranks on ``kind`` (see the module table)."""
    if kind == "cpu" or backend == "gloo":
        return "gloo"
    count = torch.cuda.device_count()
    if local_world_size > count:
        if backend == "nccl":
            raise DistError(
                f"init(backend='nccl'): {local_world_size} ranks on this host but only {count} "
                "CUDA device(s) are visible, and NCCL refuses two ranks on one device; launch at "
                "most one process per GPU (--nproc-per-node), or pass backend=None to share the "
                "GPUs with gloo collectives."
            )
        return "gloo"  # the shared-GPU mode
    return HYBRID_BACKEND


def _short_backend(pg_backend: str) -> str:
    """``"nccl"`` for any group whose CUDA tensors go through NCCL, else ``"gloo"``."""
    return "nccl" if "nccl" in str(pg_backend) else "gloo"


def init(
    backend: str | None = None, timeout_s: float = 120, *, device: str | None = None
) -> DistContext:
    """Join (or create) the job's process group and describe this process's place in it.

    Under a launcher (``RANK`` and ``WORLD_SIZE`` set): ``env://`` initialisation with the
    launcher's ``MASTER_ADDR``/``MASTER_PORT``. Without: a real one-rank group on a FileStore in a
    private temporary directory (removed by :func:`destroy`). If ``torch.distributed`` is already
    initialised, its default group is reused and :func:`destroy` leaves it alone.

    On CUDA the current device is set to the rank's first (see the module table). Under
    ``torchrun --max-restarts N`` set ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (as
    :func:`fleetgnn.distributed.launch` does) so restarted workers do not read stale keys from the
    previous attempt (pytorch/pytorch#135712).

    Args:
        backend: ``"gloo"``, ``"nccl"`` or None (chosen from the device, module table).
        timeout_s: Collective timeout in seconds (> 0): a rank waiting longer for its peers fails
            instead of hanging.
        device: ``"cpu"``, ``"cuda"``, ``"auto"`` or None (``"auto"``, or what ``backend``
            implies).

    Returns:
        The :class:`DistContext`.

    Raises:
        DistError: Invalid device, backend or timeout, CUDA asked for without CUDA, NCCL with
            more local ranks than GPUs, or inconsistent launcher variables.
    """
    if not timeout_s > 0:
        raise DistError(f"init(timeout_s={timeout_s!r}): the timeout must be > 0 seconds.")
    timeout = datetime.timedelta(seconds=float(timeout_s))
    present = [k for k in ("RANK", "WORLD_SIZE") if k in os.environ]
    if len(present) == 1:
        raise DistError(
            f"only {present[0]} is set in the environment; a launcher sets both RANK and "
            "WORLD_SIZE. Launch with torchrun / fleetgnn.distributed.launch, or unset it."
        )
    if dist.is_initialized():
        pg = str(dist.get_backend())
        be = _short_backend(pg)
        if backend is not None and backend != be:
            raise DistError(
                f"init(backend={backend!r}): torch.distributed is already initialised with "
                f"{pg!r}; pass backend=None or {be!r}."
            )
        rank, ws = dist.get_rank(), dist.get_world_size()
        local_rank = _env_int("LOCAL_RANK") if "LOCAL_RANK" in os.environ else rank
        local_ws = _env_int("LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in os.environ else ws
        if device is None:
            kind = "cuda" if be == "nccl" else "cpu"
        else:
            kind = resolve_device_type(device, backend)
        if be == "nccl" and kind == "cpu":
            raise DistError(
                f"init(device={device!r}): torch.distributed is already initialised with {pg!r} "
                "for CUDA tensors; pass device='cuda' (or None)."
            )
        return DistContext(
            rank, ws, local_rank, local_ws, be, _device(kind, local_rank), None, False
        )

    kind = resolve_device_type(device, backend)
    if present:
        rank, ws = _env_int("RANK"), _env_int("WORLD_SIZE")
        local_rank = _env_int("LOCAL_RANK") if "LOCAL_RANK" in os.environ else rank
        local_ws = _env_int("LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in os.environ else ws
        if not (ws >= 1 and 0 <= rank < ws and 0 <= local_rank < local_ws <= ws):
            raise DistError(
                f"inconsistent launcher variables RANK={rank}, WORLD_SIZE={ws}, "
                f"LOCAL_RANK={local_rank}, LOCAL_WORLD_SIZE={local_ws}: need "
                "0 <= RANK < WORLD_SIZE and 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE."
            )
        pg = _pg_backend(kind, backend, local_ws)
        dev = _device(kind, local_rank)
        addr = os.environ.get("MASTER_ADDR", "")
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        if ws > 1 and is_loopback(addr) and not agent_store and "MASTER_PORT" in os.environ:
            # every rank is on this host: rank 0's store listens on loopback only
            store = loopback_tcp_store(
                addr,
                _env_int("MASTER_PORT"),
                is_master=rank == 0,
                world_size=ws,
                timeout=timeout,
                multi_tenant=True,
            )
            dist.init_process_group(pg, store=store, rank=rank, world_size=ws, timeout=timeout)
        else:
            dist.init_process_group(pg, init_method="env://", timeout=timeout)
        store_dir = None
    else:
        rank, ws, local_rank, local_ws = 0, 1, 0, 1
        pg = _pg_backend(kind, backend, 1)
        dev = _device(kind, 0)
        store_dir = tempfile.mkdtemp(prefix="fleetgnn-pg-")
        store = dist.FileStore(os.path.join(store_dir, "store"), 1)
        dist.init_process_group(pg, store=store, rank=0, world_size=1, timeout=timeout)
    return DistContext(
        rank, ws, local_rank, local_ws, _short_backend(pg), dev, None, True, store_dir
    )


def _device(kind: str, local_rank: int) -> torch.device:
    """The rank's device: its own GPU, or ``local_rank % GPUs`` when ranks share them."""
    if kind != "cuda":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count < 1:
        raise DistError("CUDA is available but no CUDA device is visible (CUDA_VISIBLE_DEVICES?)")
    index = local_rank % count
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def destroy(ctx: DistContext) -> None:
    """Tear down the group :func:`init` created (a no-op for a group it found initialised)."""
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()
    if ctx.store_dir is not None:
        shutil.rmtree(ctx.store_dir, ignore_errors=True)
