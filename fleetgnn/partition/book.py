"""The :class:`PartitionBook`: which part owns each node, and the relabelling to contiguous parts.

A partitioner assigns every ORIGINAL node ID to one of ``P`` parts (``part_of``). Engines then
relabel the graph so that part ``p`` owns the contiguous range of NEW IDs
``[offsets[p], offsets[p + 1])``; the owner of a new ID is a binary search in ``offsets``. Nodes
keep their relative order inside a part, so a partitioner that already produces contiguous ranges
(``range``) gets the identity permutation.

On disk a book is a directory (by convention ``<dataset>/partitions/<method>-<P>/``)::

    book.json        {"format_version": 1, "method", "num_parts", "num_nodes", "params",
                      "arrays": {name: {"dtype", "shape"}}}
    part_of.npy      int32 [N]      part of each original node
    offsets.npy      int64 [P + 1]  part p owns new IDs [offsets[p], offsets[p + 1])
    perm.npy         int32 [N]      new -> old (int64 when N >= 2^31; books saved with an
                                    int64 permutation load too)

The book directory is a symbolic link to a hidden versioned sibling (``.<method>-<P>.v-<id>/``).
A save writes the new version into a temporary sibling, renames it to its version name, then
replaces the link in one ``os.replace`` and removes the old version: a reader sees the old book or
the new one, never a missing or half-written directory, and an interrupted save leaves the old
book in place. A reader resolves the link once and reads every file of that version; should the
version be removed while it reads (a save replaced it), the link has changed and the load starts
again (:data:`_LOAD_TRIES` times at most). Any other failure, a corrupt or inconsistent book,
fails at once. A book saved as a plain directory (older fleetgnn) loads as before; replacing it
moves it aside first, the one replacement with a moment (one rename) without a book.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch

from fleetgnn.errors import PartitionError
from fleetgnn.graph.csc import Graph, index_dtype
from fleetgnn.graph.dataset import fsync_dir, read_json_meta, write_json_atomic
from fleetgnn.graph.files import apply_umask, temp_prefix, write_reserved
from fleetgnn.graph.rows import RowReader
from fleetgnn.types import PathLikeStr

BOOK_FORMAT_VERSION = 1
BOOK_JSON = "book.json"
#: The saved arrays and their dtypes (``None``: the permutation's, int32 or int64).
_SAVED_ARRAYS: dict[str, np.dtype | None] = {
    "part_of": np.dtype(np.int32),
    "offsets": np.dtype(np.int64),
    "perm": None,
}
_PERM_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: How often :meth:`PartitionBook.load` reads a book whose link a save replaced while it was
#: read (the only failure read again).
_LOAD_TRIES = 3
#: The end of a disk-full message about a book.
DISK_FULL_FIX = "free some space there, or pass --no-save"
#: Nodes per step of the counting sort in :meth:`PartitionBook.from_part_of`.
_SORT_BLOCK = 1 << 20
_METHOD_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
#: The name of a saved version of a book (the link ``<method>-<P>`` points at one).
_VERSION = re.compile(r"\.[A-Za-z0-9_.+-]+\.v-[0-9a-f]{16}")


def book_dir(dataset_dir: PathLikeStr, method: str, num_parts: int) -> Path:
    """The conventional directory of a saved book: ``<dataset_dir>/partitions/<method>-<P>``."""
    return Path(dataset_dir) / "partitions" / f"{method}-{int(num_parts)}"


def _as_index_array(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise PartitionError(
            f"'{name}' must be a 1-D integer array (got dtype {arr.dtype}, shape {arr.shape})"
        )
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class PartitionBook:
    """Ownership of nodes by ``P`` parts, with each part relabelled to a contiguous ID range.

    Part ``p`` owns the new IDs ``[offsets[p], offsets[p + 1])``; new node ``i`` is original node
    ``perm[i]`` and original node ``v`` becomes ``inv_perm[v]``:

    ========  ==================================  =========================================
    part      new IDs owned                       original IDs (in new-ID order)
    ========  ==================================  =========================================
    0         ``[offsets[0], offsets[1])``        ``perm[offsets[0]:offsets[1]]``
    1         ``[offsets[1], offsets[2])``        ``perm[offsets[1]:offsets[2]]``
    ...       ...                                 ...
    ``P-1``   ``[offsets[P-1], offsets[P])``      ``perm[offsets[P-1]:offsets[P]]``
    ========  ==================================  =========================================

    with ``offsets[0] == 0`` and ``offsets[P] == N``. Parts may be empty (``P > N``).
    ``part_of[perm[i]] == owner(i)`` for every new ID ``i``, and inside a part nodes keep their
    original relative order (``perm`` is increasing on each range).

    Construction validates all arrays and raises :class:`PartitionError` on any inconsistency;
    use :meth:`from_part_of` to build a book from a bare assignment.

    Args:
        num_parts: Number of parts ``P >= 1``.
        part_of: int32 ``[N]``, the part of each ORIGINAL node ID, in ``[0, P)``.
        method: Name of the partitioner (``range``, ``hash``, ``random``, ``metis``, ...).
        offsets: int64 ``[P + 1]`` boundaries of the new-ID ranges.
        perm: int ``[N]``, new -> old (matches :meth:`Graph.permute`); int32 when
            ``N < 2^31`` in the books :meth:`from_part_of`, :meth:`from_offsets` and
            :meth:`load` build, else int64.
        inv_perm: int ``[N]``, old -> new, of ``perm``'s dtype.
        params: JSON-serialisable settings that produced the book (seed, balance, ...).
        validate: Check every array (default); ``False`` is for internal constructors whose
            arrays are consistent by construction.
    """

    num_parts: int
    part_of: np.ndarray
    method: str
    offsets: np.ndarray
    perm: np.ndarray
    inv_perm: np.ndarray
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    validate: dataclasses.InitVar[bool] = True

    def __post_init__(self, validate: bool) -> None:
        if validate:
            self._validate()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_part_of(
        cls,
        part_of: np.ndarray,
        num_parts: int,
        method: str,
        params: Mapping[str, Any] | None = None,
    ) -> PartitionBook:
        """Build a book from a part assignment, relabelling each part to a contiguous range.

        The relabelling is stable: inside a part, nodes keep their original relative order, so a
        contiguous assignment gets the identity permutation. ``perm`` and ``inv_perm`` are int32
        when ``N < 2^31`` (else int64), built by a counting sort by part in one pass over
        ``part_of`` (blocks of :data:`_SORT_BLOCK` nodes): besides the two permutations, the
        work arrays are one block's.

        Args:
            part_of: int ``[N]``, the part of each original node, in ``[0, num_parts)``.
            num_parts: Number of parts ``P >= 1``.
            method: Partitioner name stored in the book.
            params: Optional settings stored with the book.

        Returns:
            The validated book.

        Raises:
            PartitionError: If ``num_parts < 1`` or a part ID is out of range.
        """
        num_parts = _check_num_parts(num_parts)
        part_of = _as_index_array("part_of", part_of)
        _check_part_ids(part_of, num_parts)
        part_of = part_of.astype(np.int32, copy=False)
        counts = np.bincount(part_of, minlength=num_parts).astype(np.int64)
        offsets = np.zeros(num_parts + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        perm, inv_perm = _counting_sort(part_of, num_parts, offsets)
        return cls._consistent(num_parts, part_of, method, offsets, perm, inv_perm, params)

    @classmethod
    def from_offsets(
        cls, offsets: np.ndarray, method: str, params: Mapping[str, Any] | None = None
    ) -> PartitionBook:
        """Build a book of contiguous ranges of the ORIGINAL IDs (identity permutation).

        Args:
            offsets: int ``[P + 1]``, non-decreasing from 0 to ``N``.
            method: Partitioner name stored in the book.
            params: Optional settings stored with the book.

        Raises:
            PartitionError: If ``offsets`` is not a valid boundary array.
        """
        offsets = _as_index_array("offsets", offsets).astype(np.int64, copy=False)
        if offsets.size < 2 or offsets[0] != 0 or (np.diff(offsets) < 0).any():
            raise PartitionError(
                f"'offsets' must be non-decreasing, start at 0 and hold at least 2 values "
                f"(got {offsets[:8].tolist()}{'...' if offsets.size > 8 else ''})"
            )
        num_parts = offsets.size - 1
        n = int(offsets[-1])
        part_of = np.repeat(np.arange(num_parts, dtype=np.int32), np.diff(offsets))
        ident = np.arange(n, dtype=index_dtype(n))
        ident.flags.writeable = False  # one identity serves both directions (4 bytes per node)
        return cls._consistent(num_parts, part_of, method, offsets, ident, ident, params)

    @classmethod
    def _consistent(
        cls,
        num_parts: int,
        part_of: np.ndarray,
        method: str,
        offsets: np.ndarray,
        perm: np.ndarray,
        inv_perm: np.ndarray,
        params: Mapping[str, Any] | None,
    ) -> PartitionBook:
        """A book of arrays consistent by construction: only ``method`` is checked."""
        _check_method(method)
        return cls(
            num_parts=num_parts,
            part_of=part_of,
            method=method,
            offsets=offsets,
            perm=perm,
            inv_perm=inv_perm,
            params=dict(params or {}),
            validate=False,
        )

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        p = _check_num_parts(self.num_parts)
        _check_method(self.method)
        part_of = _as_index_array("part_of", self.part_of)
        if part_of.dtype != np.int32:
            raise PartitionError(
                f"'part_of' must be int32 (got {part_of.dtype}); build the book with "
                f"PartitionBook.from_part_of"
            )
        _check_part_ids(part_of, p)
        n = part_of.size
        offsets = _as_index_array("offsets", self.offsets)
        if offsets.dtype != np.int64 or offsets.shape != (p + 1,):
            raise PartitionError(
                f"'offsets' must be int64 of shape ({p + 1},) for {p} parts "
                f"(got {offsets.dtype}, shape {offsets.shape})"
            )
        counts = np.bincount(part_of, minlength=p)
        sizes = np.diff(offsets)
        if offsets[0] != 0 or offsets[-1] != n or (sizes != counts).any():
            bad = int(np.flatnonzero(sizes != counts)[0]) if (sizes != counts).any() else 0
            raise PartitionError(
                f"'offsets' disagree with 'part_of': part {bad} owns {int(counts[bad])} nodes but "
                f"offsets give range [{int(offsets[bad])}, {int(offsets[bad + 1])}) "
                f"(offsets must run from 0 to N = {n}); rebuild with PartitionBook.from_part_of"
            )
        for name in ("perm", "inv_perm"):
            arr = _as_index_array(name, getattr(self, name))
            if arr.shape != (n,):
                raise PartitionError(
                    f"'{name}' must have one entry per node, shape ({n},) (got {arr.shape})"
                )
            if n and (int(arr.min()) < 0 or int(arr.max()) >= n):
                raise PartitionError(
                    f"'{name}' holds {int(arr.min())}..{int(arr.max())}, outside [0, {n}); "
                    f"it must be a permutation of 0..N-1"
                )
        perm = np.asarray(self.perm)
        inv = np.asarray(self.inv_perm)
        if n and (inv[perm] != np.arange(n)).any():
            i = int(np.flatnonzero(inv[perm] != np.arange(n))[0])
            raise PartitionError(
                f"'perm' is not a permutation, or 'inv_perm' is not its inverse: "
                f"inv_perm[perm[{i}]] = {int(inv[perm[i]])} != {i}"
            )
        owners = np.repeat(np.arange(p, dtype=np.int32), sizes)
        wrong = part_of[perm] != owners
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            raise PartitionError(
                f"new node {i} (original {int(perm[i])}) lies in the range of part "
                f"{int(owners[i])} but part_of says part {int(part_of[perm[i]])}; "
                f"rebuild with PartitionBook.from_part_of"
            )
        if not isinstance(self.params, Mapping):
            raise PartitionError(f"'params' must be a mapping (got {type(self.params).__name__})")

    # ------------------------------------------------------------------ queries
    @property
    def num_nodes(self) -> int:
        """Number of nodes ``N``."""
        return int(self.part_of.size)

    def part_sizes(self) -> np.ndarray:
        """Nodes owned by each part, int64 ``[P]``."""
        return np.diff(self.offsets)

    def local_range(self, part: int) -> tuple[int, int]:
        """The new-ID range ``[start, stop)`` owned by ``part``.

        Raises:
            PartitionError: If ``part`` is not in ``[0, P)``.
        """
        if not 0 <= int(part) < self.num_parts:
            raise PartitionError(f"'part' must lie in [0, {self.num_parts}) (got {part})")
        return int(self.offsets[part]), int(self.offsets[part + 1])

    @overload
    def owner(self, new_ids: torch.Tensor) -> torch.Tensor: ...

    @overload
    def owner(self, new_ids: np.ndarray | int) -> np.ndarray: ...

    def owner(self, new_ids: np.ndarray | torch.Tensor | int) -> np.ndarray | torch.Tensor:
        """The part owning each NEW ID: ``searchsorted(offsets, ids, side='right') - 1``.

        Empty parts are skipped correctly (the search lands on the last boundary ``<= id``).

        Args:
            new_ids: New IDs in ``[0, N)``: a numpy array (or int), or a torch integer tensor on
                any device.

        Returns:
            int64 part IDs with the shape of ``new_ids``; a tensor on the same device for tensor
            input.

        Raises:
            PartitionError: If an ID is outside ``[0, N)`` or not an integer.
        """
        if isinstance(new_ids, torch.Tensor):
            if new_ids.dtype.is_floating_point or new_ids.dtype.is_complex:
                raise PartitionError(f"'new_ids' must be an integer tensor (got {new_ids.dtype})")
            ids = new_ids.to(torch.int64)
            if ids.numel():
                self._check_range("new_ids", int(ids.min()), int(ids.max()))
            offsets = torch.from_numpy(np.asarray(self.offsets)).to(ids.device)
            return torch.searchsorted(offsets, ids, right=True) - 1
        ids_np = np.asarray(new_ids)
        if ids_np.size and not np.issubdtype(ids_np.dtype, np.integer):
            raise PartitionError(f"'new_ids' must hold integer IDs (got dtype {ids_np.dtype})")
        if ids_np.size:
            self._check_range("new_ids", int(ids_np.min()), int(ids_np.max()))
        return np.searchsorted(self.offsets, ids_np, side="right").astype(np.int64) - 1

    def owner_of_original(self, old_ids: np.ndarray | int) -> np.ndarray:
        """The part owning each ORIGINAL ID (``part_of[old_ids]``).

        Raises:
            PartitionError: If an ID is outside ``[0, N)`` or not an integer.
        """
        ids = np.asarray(old_ids)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise PartitionError(f"'old_ids' must hold integer IDs (got dtype {ids.dtype})")
        if ids.size:
            self._check_range("old_ids", int(ids.min()), int(ids.max()))
        return self.part_of[ids].astype(np.int64)

    def to_new(self, old_ids: np.ndarray) -> np.ndarray:
        """Map original IDs to new IDs (``inv_perm[old_ids]``)."""
        ids = np.asarray(old_ids)
        if ids.size:
            self._check_range("old_ids", int(ids.min()), int(ids.max()))
        return self.inv_perm[ids]

    def to_original(self, new_ids: np.ndarray) -> np.ndarray:
        """Map new IDs to original IDs (``perm[new_ids]``)."""
        ids = np.asarray(new_ids)
        if ids.size:
            self._check_range("new_ids", int(ids.min()), int(ids.max()))
        return self.perm[ids]

    def _check_range(self, name: str, lo: int, hi: int) -> None:
        n = self.num_nodes
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise PartitionError(
                f"'{name}' holds node ID {bad}, outside the valid interval [0, {n}) of this "
                f"partition book; check that the IDs belong to the partitioned graph"
            )

    def relabel(self, graph: Graph, *, node_data: bool = True) -> Graph:
        """The graph with nodes relabelled so that part ``p`` owns ``[offsets[p], offsets[p+1])``.

        Equivalent to ``graph.permute(self.perm)``: topology and node data are permuted
        consistently, so the result is isomorphic to ``graph``. ``node_data=False`` permutes the
        topology (and edge weights) only; read a part's node data with :meth:`part_rows`.

        Raises:
            PartitionError: If ``graph`` has a different number of nodes than the book.
        """
        self._check_graph(graph)
        return graph.permute(self.perm, inv=self.inv_perm, node_data=node_data)

    def relabel_to(self, graph: Graph, directory: PathLikeStr) -> Graph:
        """:meth:`relabel`'s topology written into ``directory``, as memory maps of the files.

        ``indptr.npy`` (int64 ``[N + 1]``), ``indices.npy`` (``graph``'s index dtype) and, for a
        weighted graph, ``edge_weight.npy``, written block by block (:meth:`Graph.permute` with
        ``out_dir``: bounded work memory whatever ``N`` and ``E``) and fsynced. The result is a
        topology-only graph over read-only maps of them; other processes open the same files
        with :func:`~fleetgnn.graph.csc.open_topology`.

        Raises:
            PartitionError: If ``graph`` has a different number of nodes than the book.
            DiskFullError: ``directory`` has too little space for the files.
        """
        self._check_graph(graph)
        return graph.permute(self.perm, inv=self.inv_perm, node_data=False, out_dir=directory)

    def part_graph(self, graph: Graph, part: int) -> Graph:
        """The in-edges of ``part``'s nodes, relabelled: ``relabel(graph)`` restricted to them.

        All ``N`` nodes in new IDs; the nodes ``[offsets[part], offsets[part + 1])`` keep their
        in-edges (sources renumbered with ``inv_perm``, neighbour order kept, edge weights too),
        every other node has none, and there is no node data (read it with :meth:`part_rows`).
        Only the part's rows of ``indptr`` and its in-edges are read from ``graph``; the result
        holds an int64 ``indptr [N + 1]`` and the part's edges.

        Raises:
            PartitionError: If ``graph`` has a different number of nodes than the book, or
                ``part`` is not in ``[0, P)``.
        """
        self._check_graph(graph)
        return graph.permute(
            self.perm, inv=self.inv_perm, node_data=False, dst_range=self.local_range(part)
        )

    def part_rows(self, graph: Graph, part: int) -> Graph:
        """``part``'s nodes in new-ID order as an edgeless graph carrying their node data.

        Row ``i`` of its ``x``, ``y`` and masks is row ``perm[offsets[part] + i]`` of
        ``graph``'s, read with :class:`~fleetgnn.graph.rows.RowReader` (from the ``.npy`` file
        for a memory-mapped dataset: the pages never become resident in the process), so the
        rows are owned copies and nothing but them is read.

        Raises:
            PartitionError: If ``graph`` has a different number of nodes than the book, or
                ``part`` is not in ``[0, P)``.
        """
        self._check_graph(graph)
        lo, hi = self.local_range(part)
        ids = self.perm[lo:hi]
        data: dict[str, np.ndarray] = {}
        for name, arr in graph.node_data().items():
            reader = RowReader(arr)
            try:
                data[name] = reader.take(ids)
            finally:
                reader.close()
        return Graph(
            indptr=np.zeros(hi - lo + 1, dtype=np.int64),
            indices=np.empty(0, dtype=index_dtype(hi - lo)),
            num_classes=graph.num_classes,
            name=graph.name,
            validate="structure",
            **data,  # type: ignore[arg-type]
        )

    def _check_graph(self, graph: Graph) -> None:
        if graph.num_nodes != self.num_nodes:
            raise PartitionError(
                f"the partition book covers {self.num_nodes} nodes but graph '{graph.name}' has "
                f"{graph.num_nodes}; partition this graph again"
            )

    def __repr__(self) -> str:
        sizes = self.part_sizes()
        if self.num_parts <= 8:
            size_txt = f"sizes={sizes.tolist()}"
        else:
            size_txt = (
                f"sizes(min/mean/max)={int(sizes.min())}/{float(sizes.mean()):.1f}/"
                f"{int(sizes.max())}"
            )
        return (
            f"PartitionBook(method={self.method!r}, num_parts={self.num_parts}, "
            f"num_nodes={self.num_nodes}, {size_txt})"
        )

    def checksum(self) -> str:
        """A hash of the book's assignment (``part_of``, ``offsets``, ``perm``; dtype-free).

        Recorded in ``book.json`` and compared when loading (a torn read of a book being
        replaced fails it) and across ranks (each loads its own copy; they must agree).
        """
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{self.method}:{self.num_parts}:{self.num_nodes};".encode())
        for arr, dtype in ((self.part_of, np.int32), (self.offsets, np.int64), (self.perm, None)):
            a = np.asarray(arr)
            if dtype is None:  # the permutation: hash int32 and int64 copies alike
                dtype = np.int32 if self.num_nodes < 2**31 else np.int64
            for lo in range(0, a.size, _SORT_BLOCK):
                h.update(np.ascontiguousarray(a[lo : lo + _SORT_BLOCK], dtype=dtype).tobytes())
        return h.hexdigest()

    # ------------------------------------------------------------------ persistence
    def save(self, dataset_dir: PathLikeStr, *, overwrite: bool = False) -> Path:
        """Save under ``<dataset_dir>/partitions/<method>-<P>/`` (atomically).

        Arrays go into a temporary sibling directory, ``book.json`` is written last and the
        directory is renamed into place.

        Args:
            dataset_dir: The dataset directory (or any root directory).
            overwrite: Replace an existing book once the new one is complete.

        Returns:
            The book directory (pass it to :meth:`load`).

        Raises:
            PartitionError: If the book directory exists and ``overwrite`` is false.
            DiskFullError: The file system is full (nothing is left behind).
        """
        return self.save_to(book_dir(dataset_dir, self.method, self.num_parts), overwrite=overwrite)

    def save_to(self, path: PathLikeStr, *, overwrite: bool = False) -> Path:
        """Save into exactly the directory ``path`` (atomically); see :meth:`save`."""
        return self._save(Path(path), overwrite)

    def _save(self, out: Path, overwrite: bool, step: Callable[[str], None] | None = None) -> Path:
        """Write a new version of the book and swap the link ``out`` to it.

        ``step`` (tests) is called with ``"written"`` (the new version complete, not yet
        visible), ``"swapped"`` (the link replaced, the old version still on disk) and
        ``"removed"`` (the old version removed).
        """
        if out.exists() and not overwrite:
            raise PartitionError(
                f"partition book directory '{out}' already exists; pass overwrite=True "
                f"(--overwrite) to replace it"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(out.name), dir=out.parent))
        try:
            self._write_arrays(tmp)
            apply_umask(tmp)
            fsync_dir(tmp)
            # its version name, not a temporary one: the sweep of dead writers' leftovers skips it
            version = out.parent / f".{out.name}.v-{secrets.token_hex(8)}"
            os.replace(tmp, version)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if step is not None:
            step("written")
        try:
            old = _swap_link(out, version)
        except BaseException:
            shutil.rmtree(version, ignore_errors=True)
            raise
        if step is not None:
            step("swapped")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        if step is not None:
            step("removed")
        return out

    def _write_arrays(self, root: Path) -> None:
        """The arrays and ``book.json`` (written last) into the empty directory ``root``."""
        arrays = {}
        for name, dtype in _SAVED_ARRAYS.items():
            arr = np.ascontiguousarray(getattr(self, name), dtype=dtype)
            if dtype is None and arr.dtype not in _PERM_DTYPES:  # a hand-built book
                arr = arr.astype(np.int64)
            buf = io.BytesIO()  # its size known first: the space is reserved, then written
            np.lib.format.write_array(buf, arr, allow_pickle=False)
            (root / f"{name}.npy").touch()
            write_reserved(root / f"{name}.npy", buf.getbuffer(), DISK_FULL_FIX)
            del buf
            arrays[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape)}
        meta = {
            "format_version": BOOK_FORMAT_VERSION,
            "method": self.method,
            "num_parts": self.num_parts,
            "num_nodes": self.num_nodes,
            "params": dict(self.params),
            "arrays": arrays,
            "checksum": self.checksum(),
        }
        write_json_atomic(root / BOOK_JSON, meta)

    @classmethod
    def load(
        cls,
        path: PathLikeStr,
        *,
        method: str | None = None,
        num_parts: int | None = None,
    ) -> PartitionBook:
        """Load a saved book and validate it.

        Args:
            path: The book directory returned by :meth:`save`; or, with ``method`` and
                ``num_parts``, the dataset directory it was saved under.
            method: Partitioner name, to locate ``<path>/partitions/<method>-<P>``.
            num_parts: Part count, to locate ``<path>/partitions/<method>-<P>``.

        The link ``path`` is resolved once and that version read; only when the link changed
        while it was read (a save replaced the book) is it read again, up to three times.

        Raises:
            PartitionError: Missing, truncated or inconsistent files, or arrays that do not
                match the checksum their ``book.json`` records (at once, without reading again).
        """
        if (method is None) != (num_parts is None):
            raise PartitionError(
                "pass both 'method' and 'num_parts' to load from a dataset directory, or "
                "neither to load from a book directory"
            )
        root = Path(path) if method is None else book_dir(path, method, int(num_parts or 0))
        attempt = 1
        while True:
            target = _link_target(root)
            try:
                return cls._load_once(root, root.parent / target if target else root)
            except (_TornRead, PartitionError) as err:
                swapped = target is not None and _link_target(root) != target
                if swapped and attempt < _LOAD_TRIES:
                    attempt += 1  # the version read was replaced (and may be gone): read anew
                    continue
                if swapped:
                    raise PartitionError(
                        f"partition book '{root}' was replaced {_LOAD_TRIES} times while it was "
                        f"read; wait for 'fleetgnn partition' to finish, then start again"
                    ) from None
                if isinstance(err, _TornRead):
                    raise PartitionError(
                        f"partition book '{root}' does not match the checksum in its {BOOK_JSON}: "
                        f"its files were edited or mixed with another book's; partition again"
                    ) from None
                raise

    @classmethod
    def _load_once(cls, root: Path, where: Path) -> PartitionBook:
        """The book whose files are in ``where`` (``root``'s version; messages name ``root``)."""
        meta_path = where / BOOK_JSON
        if not meta_path.is_file():
            raise PartitionError(
                f"'{root}' holds no {BOOK_JSON}: no partition book was saved there (or its save "
                f"was interrupted); run 'fleetgnn partition' first"
            )
        meta = read_json_meta(
            meta_path,
            version=BOOK_FORMAT_VERSION,
            keys=("method", "num_parts", "num_nodes", "arrays"),
            error=PartitionError,
            fix="partition again",
        )
        specs = meta["arrays"]
        arrays: dict[str, np.ndarray] = {}
        for name, dtype in _SAVED_ARRAYS.items():
            file = where / f"{name}.npy"
            if not isinstance(specs, dict) or name not in specs or not file.is_file():
                raise PartitionError(f"partition book '{root}' lacks '{name}.npy'; partition again")
            try:
                arr = np.load(file, allow_pickle=False)
            except (ValueError, OSError, EOFError) as e:
                raise PartitionError(
                    f"'{root / file.name}' cannot be read ({e}); the file is truncated or corrupt, "
                    f"partition again"
                ) from e
            want_shape = tuple(specs[name].get("shape", ()))
            want = dtype
            if want is None:  # the permutation: int32 or int64, as book.json says
                said = specs[name].get("dtype")
                want = np.dtype(said) if said in ("<i4", "<i8") else np.dtype(np.int64)
            if arr.dtype != want or arr.shape != want_shape:
                raise PartitionError(
                    f"'{root / file.name}' holds {arr.dtype} {arr.shape} but {BOOK_JSON} says "
                    f"{want} {want_shape}; the book is inconsistent, partition again"
                )
            arrays[name] = arr
        n, p = int(meta["num_nodes"]), int(meta["num_parts"])
        if arrays["part_of"].shape != (n,) or arrays["offsets"].shape != (p + 1,):
            raise PartitionError(
                f"'{root / BOOK_JSON}' says {n} nodes and {p} parts but part_of has shape "
                f"{arrays['part_of'].shape} and offsets {arrays['offsets'].shape}; partition again"
            )
        perm = arrays["perm"]
        if n and (int(perm.min()) < 0 or int(perm.max()) >= n):
            raise PartitionError(
                f"'{root / 'perm.npy'}' holds IDs outside [0, {n}); the book is corrupt, "
                f"partition again"
            )
        dt = index_dtype(n)
        perm = perm.astype(dt, copy=False)  # an int64 file of a book with N < 2^31: narrowed
        inv = np.full(n, -1, dtype=dt)
        inv[perm] = np.arange(n, dtype=dt)
        try:
            book = cls(
                num_parts=p,
                part_of=arrays["part_of"],
                method=str(meta["method"]),
                offsets=arrays["offsets"],
                perm=perm,
                inv_perm=inv,
                params=meta.get("params") or {},
            )
        except PartitionError as err:
            raise PartitionError(f"partition book '{root}' is invalid: {err}") from err
        said = meta.get("checksum")  # books saved before checksums were recorded have none
        if said is not None and said != book.checksum():
            raise _TornRead
        return book


class _TornRead(Exception):
    """A loaded book's arrays do not match the checksum its ``book.json`` records."""


def _link_target(root: Path) -> str | None:
    """The version ``root`` links to (a sibling's name), or ``None`` for a plain directory."""
    try:
        return os.readlink(root)
    except OSError:  # not a link (a book saved by older fleetgnn), or nothing there
        return None


def _swap_link(out: Path, version: Path) -> Path | None:
    """Point the link ``out`` at ``version`` (a sibling) in one ``os.replace``.

    Returns:
        The version ``out`` pointed at before (to remove), or ``None`` (none, or not a version
        a save made).
    """
    old_target = _link_target(out)
    link = out.parent / f"{version.name}.link"
    os.symlink(version.name, link)  # relative: the dataset directory may move
    try:
        if old_target is None and out.is_dir():  # a plain directory (older fleetgnn): aside first
            old = out.parent / f".{out.name}.v-{secrets.token_hex(8)}"
            os.replace(out, old)
            old_target = old.name
        os.replace(link, out)
    except BaseException:
        link.unlink(missing_ok=True)
        raise
    fsync_dir(out.parent)
    if old_target is None or not _VERSION.fullmatch(old_target):
        return None  # a link made by hand: what it pointed at is not the book's to remove
    return out.parent / old_target


def _counting_sort(
    part_of: np.ndarray, num_parts: int, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(perm, inv_perm)`` of the stable sort of ``part_of`` (int32 when ``N < 2^31``).

    A counting sort: part ``p``'s nodes go to ``[offsets[p], offsets[p + 1])`` in their original
    order. One pass over blocks of ``part_of``: each block is sorted stably by part (a radix
    sort on 16-bit keys when ``P <= 2^16``) and its nodes are placed after the nodes earlier
    blocks gave the same part (a cursor per part). Equal to
    ``np.argsort(part_of, kind="stable")``.
    """
    n = part_of.size
    dt = index_dtype(n)
    perm = np.empty(n, dtype=dt)
    inv = np.empty(n, dtype=dt)
    key_dtype = np.uint16 if num_parts <= 1 << 16 else np.int32
    cursor = offsets[:-1].copy()  # int64 [P]: next free new ID of each part
    for a in range(0, n, _SORT_BLOCK):
        b = min(n, a + _SORT_BLOCK)
        block = part_of[a:b]
        order = np.argsort(block.astype(key_dtype, copy=False), kind="stable")
        parts = block[order]
        counts = np.bincount(block, minlength=num_parts)
        first = np.cumsum(counts) - counts  # where each part's run starts in the sorted block
        new = cursor[parts] + (np.arange(b - a) - first[parts])
        old = order + a
        perm[new] = old
        inv[old] = new
        cursor += counts
    return perm, inv


def _check_num_parts(num_parts: Any) -> int:
    if isinstance(num_parts, bool) or not isinstance(num_parts, (int, np.integer)):
        raise PartitionError(f"'num_parts' must be an integer >= 1 (got {num_parts!r})")
    if int(num_parts) < 1:
        raise PartitionError(
            f"'num_parts' must be >= 1 (got {num_parts}); use 1 for a single device"
        )
    return int(num_parts)


def _check_part_ids(part_of: np.ndarray, num_parts: int) -> None:
    if part_of.size == 0:
        return
    lo, hi = int(part_of.min()), int(part_of.max())
    if lo < 0 or hi >= num_parts:
        bad = lo if lo < 0 else hi
        node = int(np.flatnonzero(part_of == bad)[0])
        raise PartitionError(
            f"'part_of' assigns node {node} to part {bad}, outside the valid interval "
            f"[0, {num_parts}); part IDs must be 0..num_parts-1"
        )


def _check_method(method: Any) -> None:
    if not isinstance(method, str) or not _METHOD_NAME.match(method):
        raise PartitionError(
            f"'method' must be a non-empty name of letters, digits and '_.+-' (got {method!r}); "
            f"it names the book's directory"
        )
