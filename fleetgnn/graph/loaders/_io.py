"""Internal helpers shared by the loaders: chunked line reading, strict table parsing, labels.

Text is parsed with :func:`numpy.loadtxt` (C speed) a chunk of lines at a time. Only when a chunk
fails does a slow path run: a bisection over prefixes of the chunk finds the first bad line, so an
error always names the file and the 1-based line number, whatever numpy's own message says.
"""

from __future__ import annotations

import gzip
import os
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import numpy as np

from fleetgnn.config.textfile import block_lines, not_a_file
from fleetgnn.errors import DatasetError
from fleetgnn.graph.files import npy_error

# Exceptions that reading a damaged plain / gzip / zip file can raise.
READ_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    zlib.error,
    zipfile.BadZipFile,
    MemoryError,
)
_SHOW = 80  # characters of a bad line shown in messages


def short(text: str) -> str:
    """``repr`` of ``text``, cut to a readable length."""
    return repr(text if len(text) <= _SHOW else text[:_SHOW] + "...")


def require_file(path: Path, what: str) -> Path:
    """Return ``path`` if it is a file, else raise a :class:`DatasetError` naming ``what``."""
    if not path.is_file():
        raise DatasetError(
            f"{what} '{path}' {not_a_file(path)}; check the path and the dataset layout"
        )
    return path


def _open_binary(path: Path) -> IO[bytes]:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


#: Longest line a text input may have, in bytes. A longer one is refused once this much of it
#: is read (a row of a million float columns fits; a file with no line ends does not).
MAX_LINE_BYTES = 16 << 20
#: Bytes read from a text file at a time.
READ_BYTES = 1 << 20
#: Bytes of lines one chunk holds at most: a chunk ends early when its lines are long.
CHUNK_BYTES = 64 << 20


def iter_line_chunks(path: Path, chunk_rows: int) -> Iterator[tuple[int, list[str]]]:
    """Read a text file (``.gz`` transparently) in chunks of lines, in bounded memory.

    The file is read :data:`READ_BYTES` at a time; a chunk holds ``chunk_rows`` lines, or fewer
    when they pass :data:`CHUNK_BYTES`; a line longer than :data:`MAX_LINE_BYTES` is refused as
    soon as that much of it has been read, so a file without line ends (or with one huge token)
    costs a few MiB, not its size.

    Args:
        path: The file.
        chunk_rows: Lines per chunk (at most).

    Yields:
        ``(first_line, lines)``: the 1-based number of the chunk's first line and its lines,
        decoded as UTF-8, without line ends.

    Raises:
        DatasetError: If the file cannot be opened, is truncated or corrupt, is not UTF-8, or
            has a line longer than :data:`MAX_LINE_BYTES`.
    """
    line_no = 1
    try:
        f = _open_binary(path)
        if path.name.endswith(".gz") and path.stat().st_size == 0:
            f.close()
            raise DatasetError(
                f"'{path}' is empty (0 bytes), not a gzip stream; the file is truncated, obtain "
                f"it again"
            )
    except OSError as e:
        raise DatasetError(f"'{path}' cannot be opened ({e}); check the path") from e

    def too_long(number: int) -> DatasetError:
        return DatasetError(
            f"'{path}', line {number}: longer than {MAX_LINE_BYTES >> 20} MiB; the file is binary "
            f"or corrupt, or not the text table expected (one row per line)"
        )

    def chunk(raw: list[bytes], first: int) -> list[str]:
        blob = b"\n".join(raw)
        try:
            return blob.decode("utf-8").split("\n")
        except UnicodeDecodeError as e:
            bad = first + blob.count(b"\n", 0, e.start)
            raise DatasetError(
                f"'{path}', line {bad}: not UTF-8 text ({e.reason}, byte "
                f"{blob[e.start : e.start + 1]!r}); the file is binary or corrupt"
            ) from e

    with f:
        blocks = block_lines(f, READ_BYTES, MAX_LINE_BYTES, too_long)
        pending: list[bytes] = []  # whole lines not yet yielded
        size = 0  # their bytes, line ends included
        while True:
            try:
                parts = next(blocks, (0, None))[1]  # None: the end of the file
            except READ_ERRORS as e:
                raise DatasetError(
                    f"'{path}' cannot be read at or after line {line_no + len(pending)} "
                    f"({type(e).__name__}: {e}); the file is truncated or corrupt, obtain it again"
                ) from e
            if parts:
                pending += parts
                size += sum(map(len, parts)) + len(parts)
            while pending and (len(pending) >= chunk_rows or size >= CHUNK_BYTES or parts is None):
                take = pending[:chunk_rows]
                del pending[:chunk_rows]
                size -= sum(map(len, take)) + len(take)
                yield line_no, chunk(take, line_no)
                line_no += len(take)
            if parts is None:
                return


def first_true(n: int, pred: Callable[[int], bool]) -> int:
    """Smallest ``k`` in ``[1, n]`` with ``pred(k)``, for ``pred`` monotone and ``pred(n)`` true."""
    lo, hi = 0, n  # pred(lo) is false (or lo == 0), pred(hi) is true
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


class Table:
    """A strict parser for one kind of text table.

    Args:
        path: File name used in messages.
        dtype: A plain dtype (every column) or a structured dtype (one field per column).
        ncols: Expected number of columns (ignored for structured dtypes: one per field).
        delimiter: Column separator; ``None`` means runs of whitespace.
        comments: Comment marker, or ``None`` for none.
        what: Description of one row for messages, e.g. ``"'src,dst'"``.
        allow_blank: Allow blank (and comment-only) lines; otherwise every line is one row.
    """

    def __init__(
        self,
        path: Path,
        dtype: np.dtype,
        ncols: int,
        delimiter: str | None,
        comments: str | None,
        what: str,
        allow_blank: bool = False,
    ) -> None:
        self.path = path
        self.dtype = np.dtype(dtype)
        # one dtype per text column: a structured dtype's subarray field (e.g. D edge
        # features) spans as many columns as it has elements
        self.columns: list[np.dtype] = (
            [
                self.dtype[f].base
                for f in self.dtype.names
                for _ in range(int(np.prod(self.dtype[f].shape, dtype=np.int64)))
            ]
            if self.dtype.names
            else [self.dtype] * ncols
        )
        self.ncols = len(self.columns)
        self.delimiter = delimiter
        self.comments = comments
        self.what = what
        self.allow_blank = allow_blank

    def _loadtxt(self, lines: list[str]) -> np.ndarray:
        """Parse ``lines``; ``ValueError`` on any malformed line or a wrong column count."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            arr = np.loadtxt(
                lines,
                dtype=self.dtype,
                delimiter=self.delimiter,
                comments=self.comments,
                ndmin=1 if self.dtype.names else 2,
            )
        if self.dtype.names:
            return arr.reshape(-1)
        if arr.shape[0] == 0:
            return np.empty((0, self.ncols), dtype=self.dtype)
        if arr.shape[1] != self.ncols:
            raise ValueError(f"expected {self.ncols} columns, found {arr.shape[1]}")
        return arr

    def _ok(self, lines: list[str]) -> bool:
        try:
            self._loadtxt(lines)
        except (ValueError, TypeError, OverflowError):
            return False
        return True

    def parse(self, lines: list[str], first_line: int) -> np.ndarray:
        """Parse a chunk of lines whose first line has number ``first_line``.

        Whitespace-only lines of a delimited table with ``allow_blank`` are replaced by ``""`` in
        ``lines`` (in place), so that later :meth:`line_of_row` calls see what was parsed.

        Returns:
            ``[k, ncols]`` (or ``[k]`` structured) with one row per data line.

        Raises:
            DatasetError: At the first malformed line, naming the file and the line number.
        """
        try:
            arr = self._loadtxt(lines)
        except (ValueError, TypeError, OverflowError) as e:
            err: BaseException = e
            if self.allow_blank and self.delimiter is not None:
                # with an explicit delimiter loadtxt takes a whitespace-only line for one empty
                # value; blank it (on this slow path only) and try again
                lines[:] = [ln if ln.strip() else "" for ln in lines]
                try:
                    arr = self._loadtxt(lines)
                except (ValueError, TypeError, OverflowError) as e2:
                    err = e2
                else:
                    err = None  # type: ignore[assignment]
            if err is not None:
                k = first_true(len(lines), lambda m: not self._ok(lines[:m]))
                raise DatasetError(self._describe(lines[k - 1], first_line + k - 1, err)) from None
        if not self.allow_blank and arr.shape[0] != len(lines):
            k = first_true(len(lines), lambda m: self._loadtxt(lines[:m]).shape[0] < m)
            raise DatasetError(
                f"'{self.path}', line {first_line + k - 1}: empty line {short(lines[k - 1])}; "
                f"every line must hold {self.what}"
            )
        return arr

    def line_of_row(self, lines: list[str], first_line: int, row: int) -> int:
        """The line number holding data row ``row`` of a chunk that parsed without error."""
        if not self.allow_blank:
            return first_line + row
        k = first_true(len(lines), lambda m: self._loadtxt(lines[:m]).shape[0] > row)
        return first_line + k - 1

    def _describe(self, line: str, line_no: int, err: BaseException) -> str:
        where = f"'{self.path}', line {line_no}"
        data = line.split(self.comments, 1)[0] if self.comments else line
        tokens = data.split(self.delimiter) if self.delimiter else data.split()
        if len(tokens) != self.ncols:
            return (
                f"{where}: expected {self.ncols} column(s) {self.what}, found {len(tokens)} in "
                f"{short(line)}; fix or remove the line"
            )
        for i, tok in enumerate(tokens):
            dt = self.columns[i]
            try:
                if not tok.strip():
                    raise ValueError("empty value")
                np.loadtxt([tok.strip()], dtype=dt, ndmin=1)
            except (ValueError, TypeError, OverflowError):
                kind = "an integer in [-2^63, 2^63)" if dt.kind in "iu" else "a number"
                return (
                    f"{where}, column {i + 1}: cannot parse {short(tok.strip())} as {kind} "
                    f"(line {short(line)}); each line must hold {self.what}"
                )
        return f"{where}: cannot parse {short(line)} ({err}); each line must hold {self.what}"


def load_npy(path: str | os.PathLike[str], what: str) -> np.ndarray:
    """Load a ``.npy`` array without pickle support, mapping every failure to DatasetError."""
    p = require_file(Path(path), what)
    try:
        arr = np.load(p, allow_pickle=False)
    except ValueError as e:
        raise DatasetError(
            f"{what} '{p}' cannot be loaded ({npy_error(e)}); it is truncated or corrupt, or "
            f"holds Python objects (refused: pickle is disabled for safety); save a numeric "
            f"array with np.save"
        ) from e
    except READ_ERRORS as e:
        raise DatasetError(f"{what} '{p}' cannot be read ({e}); it is truncated or corrupt") from e
    if not isinstance(arr, np.ndarray):
        raise DatasetError(f"{what} '{p}' is not a single .npy array (got {type(arr).__name__})")
    return arr


def npy_header(zf: zipfile.ZipFile, member: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` from the ``.npy`` header of an archive member.

    Only the header is read, never the data, so a size can be checked before it is allocated.
    """
    with zf.open(member) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(f)
        return np.lib.format._read_array_header(f, version)  # (3, 0): UTF-8 field names


#: What the loaders' size refusals tell the user to change (the ``prepare`` flag).
MAX_MEMORY_FLAG = "--max-memory"
_FALLBACK_TOTAL = 16 << 30  # memory assumed where neither /proc/meminfo nor sysconf says
#: Bytes counted per edge while a loader builds a graph in memory: the int64 source and
#: destination arrays, their filtered copies, and ``from_edges`` / ``to_undirected`` (both
#: directions, sort keys and order, the CSC arrays).
EDGE_BYTES = 112  # measured: about 100 bytes per edge (5.3M edges, 530 MB peak)
#: Bytes counted per node besides the features: labels, masks, degree counters, ``indptr``.
NODE_BYTES = 40


def _meminfo(key: str) -> int | None:
    """``/proc/meminfo``'s ``key`` (e.g. ``"MemTotal"``) in bytes, or ``None`` if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_available() -> int | None:
    """Memory available for new allocations now (``MemAvailable``), or ``None`` if unknown."""
    return _meminfo("MemAvailable")


def memory_total() -> int:
    """This machine's physical memory in bytes (``MemTotal``; a guess of 16 GiB if unknown)."""
    total = _meminfo("MemTotal")
    if total is not None:
        return total
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return _FALLBACK_TOTAL


def default_max_bytes() -> int:
    """The default of ``--max-memory`` / ``max_bytes``: half of this machine's memory."""
    return memory_total() // 2


def human_bytes(n: int, binary: bool = False) -> str:
    """``n`` bytes for messages, in a form ``--max-memory`` and byte-count keys read back.

    Powers of 1000 with one decimal (``"2.0 GB"``); ``binary``: powers of 1024 with two
    (``"11.77 GiB"``, as the planner's memory columns count).
    """
    step, digits = (1024, 2) if binary else (1000, 1)
    units = (
        ("B", "KiB", "MiB", "GiB", "TiB", "PiB") if binary else ("B", "KB", "MB", "GB", "TB", "PB")
    )
    size = float(n)
    for unit in units:
        if abs(size) < step or unit == units[-1]:
            return f"{int(size)} B" if unit == "B" else f"{size:.{digits}f} {unit}"
        size /= step
    return f"{n} B"  # pragma: no cover


def resolve_max_bytes(max_bytes: int | None, max_dense_bytes: int | None = None) -> int:
    """The memory limit a loader works under.

    ``max_bytes``, else the older ``max_dense_bytes`` keyword, else :func:`default_max_bytes`.

    Raises:
        DatasetError: If the limit is not an integer >= 0.
    """
    limit = max_bytes if max_bytes is not None else max_dense_bytes
    if limit is None:
        return default_max_bytes()
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0:
        raise DatasetError(f"'max_bytes' must be a byte count >= 0 (got {limit!r})")
    return int(limit)


def too_big(what: str, nbytes: int, limit: int, total: int | None = None) -> DatasetError:
    """The one-line refusal of an input that declares more memory than the limit allows.

    Args:
        what: What declares the size, e.g. ``"'ind.cora.x' declares 50000 x 10000 float32
            features"``.
        nbytes: The bytes it needs.
        limit: The limit (``--max-memory``, the loaders' ``max_bytes``).
        total: The bytes needed with what is already held, when more than ``nbytes``.
    """
    shown = human_bytes(total) if total else ""
    held = (
        f" ({shown} with what is already loaded)" if shown and shown != human_bytes(nbytes) else ""
    )
    return DatasetError(
        f"{what}: {human_bytes(nbytes)}{held}, over {MAX_MEMORY_FLAG} {human_bytes(limit)} "
        f"(max_bytes in Python); the file is corrupt or hostile, or raise {MAX_MEMORY_FLAG} "
        f"if the file is trusted"
    )


def nbytes_of(shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes of a dense array of ``shape`` (exact, with Python integers: no overflow)."""
    total = int(itemsize)
    for s in shape:
        total *= int(s)
    return total


class MemoryBudget:
    """The memory a loader may use, checked against sizes an input declares before allocating.

    :meth:`take` adds a planned allocation to a running total and refuses it (one line naming
    ``--max-memory``) when the total would pass the limit, so the arrays a loader holds at once
    stay within ``limit`` however small the file that declared them.

    Args:
        limit: Bytes allowed (``--max-memory``).
    """

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.used = 0

    def check(self, what: str, nbytes: int) -> None:
        """Refuse ``nbytes`` (on its own, not counted) if it alone exceeds the limit."""
        if nbytes > self.limit:
            raise too_big(what, nbytes, self.limit)

    def take(self, what: str, nbytes: int) -> None:
        """Count ``nbytes`` as held from now on; refuse if the total would exceed the limit."""
        total = self.used + int(nbytes)
        if total > self.limit:
            raise too_big(what, int(nbytes), self.limit, total if self.used else None)
        self.used = total

    def release(self, nbytes: int) -> None:
        """Count ``nbytes`` as freed."""
        self.used = max(0, self.used - int(nbytes))


def check_dense_size(shape: tuple[int, ...], itemsize: int, limit: int, what: str) -> None:
    """Refuse a dense allocation larger than ``limit`` bytes (a corrupt or hostile shape)."""
    nbytes = nbytes_of(shape, itemsize)
    if nbytes > limit:
        dims = " x ".join(str(int(s)) for s in shape)
        raise too_big(f"{what} of shape {dims} declares a dense array", nbytes, limit)


def class_ids(y: np.ndarray, where: str) -> np.ndarray:
    """Integer labels ``y`` as int64 class IDs, ``-1`` = unlabelled (``where`` names the source).

    Raises:
        DatasetError: A label below ``-1``.
    """
    y = y.astype(np.int64)
    if y.size and int(y.min()) < -1:
        raise DatasetError(f"{where} hold {int(y.min())}; use -1 for unlabelled")
    return y


def num_classes_of(y: np.ndarray) -> int:
    """Classes of labels ``y`` (``-1`` = unlabelled): the largest class ID + 1, at least 1."""
    return int(y.max()) + 1 if y.size and int(y.max()) >= 0 else 1
