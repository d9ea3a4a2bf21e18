"""Distributed shared memory (WholeGraph's DSM) for the ranks of one host.

:class:`ShardedTensor` spreads a row-partitioned tensor over the ranks: rank ``p`` owns shard
``p`` (any number of rows, including 0). With ``one_sided=True`` every shard is placed in shared
memory by its owner and mapped by every rank, so :meth:`ShardedTensor.gather` reads peer rows
directly, without any collective (it also serves inference and uneven call counts). With
``one_sided=False`` (ranks on different hosts; selectable on one host for comparisons) the same
gather is a two-sided request/response exchange over
:class:`~fleetgnn.distributed.comm.Communicator`.
Both return bit-identical rows in input order.

Example layout (3 ranks, 7 rows, shards of 3, 0 and 4 rows):

====  ============  ==============================================
rank  shard rows    global rows (``gather_global`` ids)
====  ============  ==============================================
0     3             0, 1, 2
1     0             (none)
2     4             3, 4, 5, 6
====  ============  ==============================================

Placement:

- CPU: the owner writes its shard into a file under ``/dev/shm``
  (``fleetgnn-<name>-<token>-r<rank>-h<tag>-p<pid>``, the tag naming the host and PID namespace);
  file names are exchanged with ``all_gather_object``; every rank maps every shard (peers
  read-only); after a barrier confirming every rank has mapped every shard, owners unlink their
  files at once. The mappings stay valid, the memory is freed when the last process unmaps it, and
  no segment outlives the job even if a rank is later SIGKILLed. A rank killed *inside* ``create``
  (between writing and the barrier) can leave its own file behind: :func:`sweep_stale_segments`
  removes segments of dead processes.
- CUDA: shards stay in device memory and are shared through CUDA IPC
  (``torch.multiprocessing.reductions.reduce_tensor`` / rebuild), handles exchanged with
  ``all_gather_object``; the owner keeps its shard alive until :meth:`ShardedTensor.close`.

:class:`SharedTensor` is the host tier's building block: one copy of a tensor per host, written by
one rank and mapped read-only by the others.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import tempfile
import uuid
import warnings
from typing import Any

import torch

from fleetgnn.distributed.comm import Communicator
from fleetgnn.distributed.errors import DistError
from fleetgnn.graph.files import owner_tag, process_alive
from fleetgnn.kernels import gather_rows
from fleetgnn.types import Closing

#: Every shared-memory segment fleetgnn creates starts with this prefix.
SHM_PREFIX = "fleetgnn-"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.]{1,64}$")
_SEGMENT_RE = re.compile(r"^fleetgnn-.+?(?:-h(?P<tag>[0-9a-f]{8}))?-p(?P<pid>\d+)$")


def shm_dir() -> str:
    """Directory for shared-memory segments: ``/dev/shm`` when present, else the temp dir."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def sweep_stale_segments(directory: str | None = None) -> list[str]:
    """Unlink fleetgnn segments whose creating process no longer exists; returns their paths.

    Only needed after a rank was killed inside a ``create`` call (``fleetgnn train`` calls it
    when it starts). Segment names carry the creator's PID and a tag of its host and PID
    namespace (``...-h<tag>-p<pid>``): segments of another namespace sharing the directory (a
    container with the host's ``/dev/shm``) are left alone, as are those of live processes.
    Segments named without a tag (older fleetgnn versions) are judged by PID alone.
    """
    directory = directory or shm_dir()
    removed = []
    for entry in os.listdir(directory):
        m = _SEGMENT_RE.match(entry)
        if not m:
            continue
        if m.group("tag") is not None and m.group("tag") != owner_tag():
            continue  # another host or PID namespace: its PIDs mean nothing here
        if process_alive(int(m.group("pid"))):
            continue  # alive (or not ours to signal): keep
        path = os.path.join(directory, entry)
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def _owner() -> str:
    """The end of a segment name: ``-h<host and PID namespace tag>-p<pid>``."""
    return f"-h{owner_tag()}-p{os.getpid()}"


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise DistError(f"unknown dtype {name!r}")
    return dt


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise DistError(
            f"shared tensor name {name!r} is invalid: use 1-64 characters from letters, digits, "
            "'_' and '.' (it becomes part of a file name), e.g. name='features'."
        )


def _write_segment(path: str, src: torch.Tensor) -> torch.Tensor:
    """Create ``path`` (exclusively), copy ``src`` into it; returns a writable mapped tensor."""
    nbytes = src.numel() * src.element_size()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            # reserve the pages now: writing to a sparse tmpfs file that runs out of space
            # raises SIGBUS instead of an error
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as e:
            free = _free_bytes(os.path.dirname(path))
            raise DistError(
                f"cannot reserve {nbytes} bytes for shared segment {path} ({e.strerror}); "
                f"{free} bytes free in {os.path.dirname(path)}. Enlarge /dev/shm (e.g. docker "
                "--shm-size) or place less data in shared memory."
            ) from e
        buf = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    dst = torch.frombuffer(buf, dtype=src.dtype, count=src.numel()).view(src.shape)
    dst.copy_(src)
    return dst


def _map_segment(path: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Map ``path`` read-only as a tensor (writing to it crashes the process)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        return torch.frombuffer(buf, dtype=dtype, count=math.prod(shape)).view(shape)


def _free_bytes(directory: str) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def _unlink(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _raise_errors(what: str, errors: list[str | None]) -> None:
    bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
    if bad:
        raise DistError(f"{what} failed (on every rank):\n  " + "\n  ".join(bad))


class ShardedTensor(Closing):
    """A row-sharded tensor in distributed shared memory, with a global gather.

    Build with :meth:`create` (collective). Shard ``p`` holds ``rows[p]`` rows of trailing shape
    :attr:`trailing_shape`; the concatenation of the shards in rank order is the logical tensor
    (global row ``offsets[p] + i`` is row ``i`` of shard ``p``).

    Attributes:
        name: The user-given name (part of the segment file names).
        rows: Rows per shard, by rank.
        offsets: ``[0, rows[0], rows[0] + rows[1], ...]`` (length ``world_size + 1``).
        trailing_shape: Shape of one row.
        dtype: Element type.
        one_sided: Whether gathers read the mapped shards directly (True) or exchange rows (False).
    """

    def __init__(
        self,
        comm: Communicator,
        name: str,
        rows: tuple[int, ...],
        trailing_shape: tuple[int, ...],
        dtype: torch.dtype,
        one_sided: bool,
        shards: list[torch.Tensor | None],
        keep: Any = None,
    ) -> None:
        self.comm = comm
        self.name = name
        self.rows = rows
        offs = [0]
        for r in rows:
            offs.append(offs[-1] + r)
        self.offsets: tuple[int, ...] = tuple(offs)
        self.trailing_shape = trailing_shape
        self.dtype = dtype
        self.one_sided = one_sided
        self._shards = shards
        self._keep = keep
        self._closed = False
        self._rows_t = torch.tensor(rows, dtype=torch.int64)
        self._offsets_t = torch.tensor(offs, dtype=torch.int64)
        self._tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def _ids_device(self, ids: torch.Tensor) -> torch.device:
        """Where ids are checked and split: the host, or theirs if this rank's shard is there.

        Ids on the shard's device stay there (no round trip through the host).
        """
        shard = self._shards[self.comm.rank]
        if shard is not None and ids.device == shard.device:
            return ids.device
        return torch.device("cpu")

    def _tables_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows per shard and shard offsets on ``device`` (copied there once)."""
        if device.type == "cpu":
            return self._rows_t, self._offsets_t
        if device not in self._tables:
            self._tables[device] = (self._rows_t.to(device), self._offsets_t.to(device))
        return self._tables[device]

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        local: torch.Tensor,
        comm: Communicator,
        *,
        name: str,
        one_sided: bool = True,
        directory: str | None = None,
    ) -> ShardedTensor:
        """Place every rank's shard in distributed shared memory. Collective.

        Communicates three ``all_gather_object`` rounds (shapes, segment names, mapped
        confirmations) and a barrier; when it returns on any rank, no segment file is left.
        Memory: one copy of each shard per host in shared memory (CPU; the caller may drop
        ``local`` afterwards) or none extra (CUDA IPC, and two-sided mode, which keeps a
        reference to ``local``).

        Args:
            local: This rank's rows ``[rows, *F]``; ``F`` and dtype must agree across ranks.
            comm: The communicator of the ranks sharing the tensor.
            name: Segment name (1-64 of ``[A-Za-z0-9_.]``), the same on every rank.
            one_sided: Map every shard on every rank (ranks on one host). False: keep only the
                own shard and gather by two-sided exchange (works across hosts).
            directory: Where CPU segments go (default :func:`shm_dir`, i.e. ``/dev/shm``).

        Returns:
            The :class:`ShardedTensor`, identical in layout on every rank.

        Raises:
            DistError: On every rank, if any rank's input is invalid, the ranks disagree on name,
                dtype, trailing shape or mode, one-sided mode spans hosts, or a segment cannot be
                written or mapped. Segments already written are removed first.
        """
        error = None
        try:
            _check_name(name)
            if not isinstance(local, torch.Tensor) or local.dim() < 1:
                raise DistError(
                    f"ShardedTensor.create: 'local' must be a tensor of rows (>= 1 dimension), "
                    f"got {type(local).__name__} {tuple(getattr(local, 'shape', ()))}."
                )
            if one_sided and not comm.same_host:
                raise DistError(
                    "ShardedTensor.create(one_sided=True) needs every rank on one host "
                    "(comm.same_host is False); use one_sided=False across hosts."
                )
        except DistError as e:
            error = str(e)
        ok = error is None
        mine = {
            "error": error,
            "name": name,
            "rows": int(local.shape[0]) if ok else 0,
            "trailing": tuple(local.shape[1:]) if ok else None,
            "dtype": str(local.dtype) if ok else None,
            "device": local.device.type if ok else None,
            "one_sided": bool(one_sided),
            "token": uuid.uuid4().hex[:12],
        }
        metas = comm.all_gather_object(mine)
        _raise_errors(f"ShardedTensor.create(name={name!r})", [m["error"] for m in metas])
        for key in ("name", "trailing", "dtype", "device", "one_sided"):
            vals = [m[key] for m in metas]
            if len(set(vals)) > 1:
                listing = ", ".join(f"rank {r}: {v}" for r, v in enumerate(vals))
                raise DistError(
                    f"ShardedTensor.create(name={name!r}): ranks disagree on {key} ({listing}); "
                    "every rank must pass shards of one dtype and row shape, the same name and "
                    "the same one_sided."
                )
        rows = tuple(int(m["rows"]) for m in metas)
        trailing = tuple(metas[0]["trailing"])
        dtype = local.dtype
        if not one_sided:
            shards: list[torch.Tensor | None] = [None] * comm.world_size
            shards[comm.rank] = local
            return cls(comm, name, rows, trailing, dtype, False, shards)
        if local.is_cuda:
            return cls._create_cuda(local, comm, name, rows, trailing, dtype)
        token = metas[0]["token"]
        return cls._create_cpu(local, comm, name, rows, trailing, dtype, token, directory)

    @classmethod
    def _create_cpu(
        cls,
        local: torch.Tensor,
        comm: Communicator,
        name: str,
        rows: tuple[int, ...],
        trailing: tuple[int, ...],
        dtype: torch.dtype,
        token: str,
        directory: str | None,
    ) -> ShardedTensor:
        directory = directory or shm_dir()
        path = None
        error = None
        own: torch.Tensor | None = None
        try:
            if rows[comm.rank] > 0:
                path = os.path.join(
                    directory,
                    f"{SHM_PREFIX}{name}-{token}-r{comm.rank}{_owner()}",
                )
                own = _write_segment(path, local.contiguous())
        except (OSError, DistError) as e:
            error = f"writing the shard to shared memory: {e}"
        try:
            paths = comm.all_gather_object((path, error))
            _raise_errors(f"ShardedTensor.create(name={name!r})", [e for _, e in paths])
            shards: list[torch.Tensor | None] = []
            error = None
            try:
                for p, (peer_path, _) in enumerate(paths):
                    if rows[p] == 0:
                        shards.append(torch.empty((0, *trailing), dtype=dtype))
                    elif p == comm.rank:
                        shards.append(own)
                    else:
                        shards.append(_map_segment(peer_path, (rows[p], *trailing), dtype))
            except OSError as e:
                error = f"mapping a peer shard: {e}"
            # every rank has mapped every shard (or failed): the names can go
            errors = comm.all_gather_object(error)
            _raise_errors(f"ShardedTensor.create(name={name!r})", errors)
        finally:
            _unlink(path)
        comm.barrier()  # on return, no rank's segment file is left
        return cls(comm, name, rows, trailing, dtype, True, shards)

    @classmethod
    def _create_cuda(
        cls,
        local: torch.Tensor,
        comm: Communicator,
        name: str,
        rows: tuple[int, ...],
        trailing: tuple[int, ...],
        dtype: torch.dtype,
    ) -> ShardedTensor:
        from torch.multiprocessing.reductions import reduce_tensor

        local = local.contiguous()
        # a handle only where a peer opens it: an exported handle no process opens leaves the
        # producer warning at exit that shared CUDA tensors were not released
        handle = reduce_tensor(local) if rows[comm.rank] > 0 and comm.world_size > 1 else None
        handles = comm.all_gather_object(handle)
        shards: list[torch.Tensor | None] = []
        error = None
        try:
            for p, h in enumerate(handles):
                if p == comm.rank:
                    shards.append(local)
                elif h is None:
                    shards.append(torch.empty((0, *trailing), dtype=dtype, device=local.device))
                else:
                    rebuild, args = h
                    shards.append(rebuild(*args))
        except (RuntimeError, OSError) as e:
            error = f"opening a peer's CUDA IPC handle: {e}"
        errors = comm.all_gather_object(error)
        _raise_errors(f"ShardedTensor.create(name={name!r})", errors)
        return cls(comm, name, rows, trailing, dtype, True, shards, keep=local)

    # ------------------------------------------------------------------ access
    @property
    def world_size(self) -> int:
        """Number of shards (ranks)."""
        return len(self.rows)

    @property
    def num_rows(self) -> int:
        """Rows of the logical (concatenated) tensor."""
        return self.offsets[-1]

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the logical (concatenated) tensor."""
        return (self.num_rows, *self.trailing_shape)

    @property
    def local_shard(self) -> torch.Tensor:
        """This rank's shard (in shared memory in one-sided CPU mode)."""
        self._check_open()
        shard = self._shards[self.comm.rank]
        assert shard is not None  # own shard is always present
        return shard

    @property
    def shards(self) -> list[torch.Tensor]:
        """Every rank's shard, mapped into this process (one-sided mode only); peers read-only."""
        self._check_open()
        if not self.one_sided:
            raise DistError(
                f"ShardedTensor {self.name!r} is two-sided: peer shards are not mapped here; use "
                "gather(), or create with one_sided=True on a single host."
            )
        return [s for s in self._shards if s is not None]

    def gather(
        self, owner: torch.Tensor, local_index: torch.Tensor, *, checked: bool = False
    ) -> torch.Tensor:
        """Rows ``shard[owner[i]][local_index[i]]`` in input order.

        One-sided mode reads the mapped shards directly: no collective, any rank may call it any
        number of times. Two-sided mode is a collective (every rank must call it the same number
        of times, with any number of ids, including 0): counts, ids and rows are exchanged with
        ``all_to_all``. Traffic is recorded in ``comm.meter``: one-sided, rows of the own shard on
        ``"local"`` and rows of other shards on ``"peer"`` (one message per shard read); two-sided,
        whatever the all-to-alls record. Memory: the output plus, two-sided, the ids and rows in
        transit.

        Shapes:
            - owner, local_index: ``[n]`` (integer)
            - output: ``[n, *trailing_shape]``

        ``checked=True``: the caller guarantees every pair is in range (the store's own
        lookups), so the range checks, each a host sync on a GPU, are skipped.

        Raises:
            DistError: Ids out of range, mismatched shapes or a closed tensor (in two-sided debug
                mode, on every rank).
        """
        self._check_open()
        error = None
        try:
            owner, local_index = self.check_ids(owner, local_index, ranges=not checked)
        except DistError as e:
            if self.one_sided:
                raise
            error = str(e)
        with torch.no_grad():
            if self.one_sided:
                return self._gather_one_sided(owner, local_index)
            self.comm.verify("ShardedTensor.gather", error=error, name=self.name)
            if error is not None:
                raise DistError(error)
            return self._gather_two_sided(owner, local_index)

    def rows_via(self, via: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``local_shard[via[ids]]`` for a world of one rank, whose shard holds every row.

        One gather through the lookup ``via`` (see :func:`~fleetgnn.kernels.gather_rows`),
        without :meth:`gather`'s per-call checks and counts (each a host sync on a GPU); the
        caller's ``via`` maps into the shard. Traffic is recorded as :meth:`gather` records it.

        Raises:
            DistError: With more than one rank.
        """
        self._check_open()
        if self.world_size != 1:
            raise DistError(f"rows_via reads one rank's shard; {self.name!r} has {self.world_size}")
        shard = self.local_shard
        if not self.one_sided:  # two-sided traffic is its all-to-alls': gather records them
            local = via.to(ids.device)[ids]
            return self.gather(torch.zeros_like(local, dtype=torch.int64), local)
        rows = gather_rows(shard, ids.to(shard.device), via=via.to(shard.device))
        if ids.numel():
            self.comm.meter.record("local", ids.numel() * self._row_bytes(), 1)
        return rows

    def gather_global(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` of the logical tensor (the shards concatenated in rank order).

        Same communication as :meth:`gather`.
        """
        self._check_open()
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.is_floating_point():
            raise DistError(
                f"gather_global: 'ids' must be a 1-D integer tensor, got "
                f"{getattr(ids, 'dtype', type(ids).__name__)} {tuple(getattr(ids, 'shape', ()))}."
            )
        dev = self._ids_device(ids)
        ids_dev = ids.to(dev, torch.int64)
        if ids_dev.numel() and (int(ids_dev.min()) < 0 or int(ids_dev.max()) >= self.num_rows):
            bad = ids_dev[(ids_dev < 0) | (ids_dev >= self.num_rows)][0].item()
            raise DistError(
                f"gather_global: id {bad} is out of range [0, {self.num_rows}) of "
                f"ShardedTensor {self.name!r}; ids index the concatenation of the shards."
            )
        offsets = self._tables_on(dev)[1]
        owner = torch.searchsorted(offsets[1:], ids_dev, right=True)
        return self.gather(owner, ids_dev - offsets[owner])

    def check_ids(
        self, owner: torch.Tensor, local_index: torch.Tensor, *, ranges: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate ``(owner, local_index)`` of :meth:`gather`; returns them as int64 tensors.

        ``ranges=False`` checks types and shapes only (no pass over the values).
        """
        for what, t in (("owner", owner), ("local_index", local_index)):
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.is_floating_point():
                raise DistError(
                    f"ShardedTensor.gather: '{what}' must be a 1-D integer tensor, got "
                    f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}."
                )
        if owner.numel() != local_index.numel():
            raise DistError(
                f"ShardedTensor.gather: 'owner' has {owner.numel()} entries but 'local_index' "
                f"has {local_index.numel()}; pass one (owner, local index) pair per row."
            )
        dev = self._ids_device(local_index)
        owner = owner.to(dev, torch.int64)
        local_index = local_index.to(dev, torch.int64)
        if owner.numel() == 0 or not ranges:
            return owner, local_index
        if int(owner.min()) < 0 or int(owner.max()) >= self.world_size:
            bad = owner[(owner < 0) | (owner >= self.world_size)][0].item()
            raise DistError(
                f"ShardedTensor.gather: owner {bad} is not a rank in [0, {self.world_size})."
            )
        limit = self._tables_on(dev)[0][owner]
        bad_mask = (local_index < 0) | (local_index >= limit)
        if bool(bad_mask.any()):
            i = int(torch.nonzero(bad_mask)[0])
            o = int(owner[i])
            raise DistError(
                f"ShardedTensor.gather: local_index[{i}] = {int(local_index[i])} is out of range "
                f"[0, {self.rows[o]}) of shard {o} of {self.name!r} (rows per shard: "
                f"{list(self.rows)})."
            )
        return owner, local_index

    def _row_bytes(self) -> int:
        return math.prod(self.trailing_shape) * self.dtype.itemsize

    def _gather_one_sided(self, owner: torch.Tensor, local_index: torch.Tensor) -> torch.Tensor:
        me = self.comm.rank
        device = self.local_shard.device
        out = torch.empty((owner.numel(), *self.trailing_shape), dtype=self.dtype, device=device)
        if owner.numel() == 0:
            return out
        counts = torch.bincount(owner, minlength=self.world_size).tolist()
        row_bytes = self._row_bytes()
        remote_rows = 0
        remote_msgs = 0
        single = sum(1 for c in counts if c) == 1
        for p, c in enumerate(counts):  # one bulk read per shard (ranks, not rows)
            if c == 0:
                continue
            shard = self._shards[p]
            assert shard is not None  # one-sided mode maps every shard
            if single and shard.device == device:  # one shard: read straight into the output
                gather_rows(shard, local_index.to(shard.device), out=out)
            else:
                pos = torch.nonzero(owner == p).squeeze(1)
                rows = gather_rows(shard, local_index[pos].to(shard.device))
                out.index_copy_(0, pos.to(device), rows.to(device))
            if p == me:
                self.comm.meter.record("local", c * row_bytes, 1)
            else:
                remote_rows += c
                remote_msgs += 1
        if remote_msgs:
            self.comm.meter.record("peer", remote_rows * row_bytes, remote_msgs)
        return out

    def _gather_two_sided(self, owner: torch.Tensor, local_index: torch.Tensor) -> torch.Tensor:
        comm = self.comm
        device = comm.device
        send_counts = torch.bincount(owner, minlength=self.world_size).tolist()
        order = torch.argsort(owner, stable=True)
        ids = local_index[order].to(device)
        # 1) counts, 2) ids to their owners
        recv_ids, recv_counts = comm.all_to_all(ids, send_counts)
        # 3) owners index their shard, 4) rows go back with the splits swapped
        rows = gather_rows(self.local_shard, recv_ids.to(self.local_shard.device)).to(device)
        got, _ = comm.all_to_all(rows, recv_counts, recv_counts=send_counts)
        out = torch.empty_like(got)
        out[order.to(device)] = got
        return out

    # ------------------------------------------------------------------ lifetime
    def _check_open(self) -> None:
        if self._closed:
            raise DistError(f"ShardedTensor {self.name!r} is closed; create a new one.")

    def close(self) -> None:
        """Drop this rank's mappings (local; memory is freed when the last rank unmaps)."""
        self._shards = []
        self._keep = None
        self._closed = True

    def __repr__(self) -> str:
        mode = "one-sided" if self.one_sided else "two-sided"
        state = ", closed" if self._closed else ""
        return (
            f"ShardedTensor(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, "
            f"rows_per_rank={list(self.rows)}, {mode}{state})"
        )


class SharedTensor(Closing):
    """One copy of a tensor per host in shared memory: written by ``owner``, mapped by the rest.

    Attributes:
        name: The user-given name.
        tensor: The shared tensor (writable on the owner, read-only elsewhere: writing to it on a
            non-owner rank crashes that process).
        owner: The rank that wrote it.
    """

    def __init__(self, name: str, tensor: torch.Tensor, owner: int) -> None:
        self.name = name
        self.tensor: torch.Tensor = tensor
        self.owner = owner
        self._closed = False

    @classmethod
    def create(
        cls,
        tensor: torch.Tensor | None,
        comm: Communicator,
        *,
        name: str,
        owner: int = 0,
        directory: str | None = None,
    ) -> SharedTensor:
        """Share ``tensor`` (given on ``owner``; others pass None) with the ranks of ``comm``.

        Collective: one ``broadcast_object`` (segment name, shape, dtype) and one
        ``all_gather_object`` (mapped confirmations); then the segment name is unlinked and a
        barrier makes sure it is gone when ``create`` returns.
        ``comm`` must span one host (for several hosts use one communicator per host, e.g. from
        ``torch.distributed.new_subgroups()``). Memory: one copy per host in shared memory; the
        owner may drop its original afterwards.

        Raises:
            DistError: On every rank, if the owner's tensor is invalid, the name or owner is bad,
                or the segment cannot be written or mapped.
        """
        owner = int(owner)
        if not 0 <= owner < comm.world_size:
            raise DistError(
                f"SharedTensor.create(owner={owner}): owner must be a rank in "
                f"[0, {comm.world_size})."
            )
        if not comm.same_host:
            raise DistError(
                "SharedTensor.create needs a communicator whose ranks share one host "
                "(comm.same_host is False); create one per host (dist.new_subgroups())."
            )
        directory = directory or shm_dir()
        path = None
        mine: torch.Tensor | None = None
        info: dict[str, Any] = {"error": None, "name": name}
        if comm.rank == owner:
            try:
                _check_name(name)
                if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
                    raise DistError(
                        f"SharedTensor.create: the owner (rank {owner}) must pass a CPU tensor, "
                        f"got {type(tensor).__name__} on "
                        f"{getattr(tensor, 'device', 'n/a')}; move it with .cpu()."
                    )
                info.update(shape=tuple(tensor.shape), dtype=str(tensor.dtype))
                if tensor.numel() > 0:
                    path = os.path.join(
                        directory,
                        f"{SHM_PREFIX}{name}-{uuid.uuid4().hex[:12]}-r{owner}{_owner()}",
                    )
                    mine = _write_segment(path, tensor.contiguous())
                else:
                    mine = tensor.clone()
                info["path"] = path
            except (OSError, DistError) as e:
                info["error"] = str(e)
        try:
            info = comm.broadcast_object(info, src=owner)
            if info["error"]:
                raise DistError(
                    f"SharedTensor.create(name={name!r}) failed on the owner: {info['error']}"
                )
            error = None
            if comm.rank != owner:
                try:
                    if info["name"] != name:
                        raise DistError(f"name {name!r} differs from the owner's {info['name']!r}")
                    shape, dtype = tuple(info["shape"]), _dtype(info["dtype"])
                    if info["path"] is None:
                        mine = torch.empty(shape, dtype=dtype)
                    else:
                        mine = _map_segment(info["path"], shape, dtype)
                except (OSError, DistError) as e:
                    error = str(e)
            errors = comm.all_gather_object(error)
            _raise_errors(f"SharedTensor.create(name={name!r})", errors)
        finally:
            _unlink(path)
        comm.barrier()  # on return, the owner's segment file is gone
        assert mine is not None  # set on every path that did not raise
        return cls(name, mine, owner)

    def close(self) -> None:
        """Drop this rank's mapping (local)."""
        self.tensor = torch.empty(0)
        self._closed = True

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return (
            f"SharedTensor(name={self.name!r}, shape={tuple(self.tensor.shape)}, "
            f"dtype={self.tensor.dtype}, owner={self.owner}{state})"
        )
