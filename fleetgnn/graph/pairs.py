"""Node pairs from a file: what ``fleetgnn predict --task link --pairs FILE`` scores.

Formats (by suffix):

=========================  ==============================================================
file                       layout
=========================  ==============================================================
``.npy``                   an integer array ``[P, 2]`` (or ``[2, P]`` with ``P != 2``)
anything else (text/CSV)   one pair per line: two node IDs separated by a comma, tabs or
                           spaces; ``#`` starts a comment; the first line may be a header
                           (two fields, neither an integer: ``src,dst``), which is skipped;
                           any other line that is not two integers is refused
=========================  ==============================================================

Node IDs are the dataset's (its original numbering), in ``[0, N)``. Every refusal is one line
naming the file, and for text files the line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fleetgnn.config.textfile import block_lines, not_a_file
from fleetgnn.errors import ConfigError
from fleetgnn.graph.files import npy_error
from fleetgnn.types import PathLikeStr

_FIX = "give two columns of node IDs (source, destination), one pair per row"


#: Longest line a text pairs file may have, in bytes (two node IDs and a comment fit many times
#: over); a longer one is refused as soon as it is seen, without reading it whole.
MAX_LINE_BYTES = 4096
#: Bytes a text pairs file is read in at a time.
BLOCK_BYTES = 1 << 20


def read_pairs(path: PathLikeStr, num_nodes: int, *, arg: str = "--pairs") -> np.ndarray:
    """The pairs of ``path`` as int64 ``[P, 2]``, checked against ``num_nodes``.

    A text file is read in blocks of :data:`BLOCK_BYTES` and each block's pairs go straight
    into an int64 array, so memory stays within about twice the result (what the ``.npy`` path
    takes), whatever the file holds: a line over :data:`MAX_LINE_BYTES` is refused when seen.

    Args:
        path: A ``.npy`` file or a text/CSV file (see the module docstring).
        num_nodes: The dataset's node count ``N``; IDs must be in ``[0, N)``.
        arg: The argument's name in messages.

    Raises:
        ConfigError: A missing or unreadable file, the wrong shape or dtype, no pairs, a line
            that is not two integers (past a first header line) or too long, or an ID outside
            ``[0, N)`` (one line).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{arg} '{p}' {not_a_file(p)}; {_FIX}")
    if p.suffix == ".npy":
        pairs = _read_npy(p, arg)
    else:
        pairs = _read_text(p, arg, num_nodes)
    if pairs.shape[0] == 0:
        raise ConfigError(f"{arg} '{p}' holds no pairs; {_FIX}")
    lo, hi = int(pairs.min()), int(pairs.max())
    if lo < 0 or hi >= num_nodes:  # a .npy file's (a text file's IDs are checked as read)
        bad = lo if lo < 0 else hi
        row = int(np.argwhere((pairs == bad).any(axis=1))[0, 0])
        raise ConfigError(_outside(arg, p, bad, f"row {row}", num_nodes))
    return pairs


def _outside(arg: str, p: Path, bad: int, where: str, num_nodes: int) -> str:
    return (
        f"{arg} '{p}': node ID {bad} ({where}) is outside [0, {num_nodes}): the dataset has "
        f"{num_nodes} nodes; use its node IDs"
    )


def _read_npy(p: Path, arg: str) -> np.ndarray:
    try:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{arg} '{p}' is not a readable .npy file ({npy_error(e)}); {_FIX}"
        ) from None
    if arr.ndim == 2 and arr.shape[0] == 2 and arr.shape[1] != 2:
        arr = arr.T  # [2, P], the edge_index layout
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ConfigError(f"{arg} '{p}' has shape {tuple(arr.shape)}, not [P, 2]; {_FIX}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"{arg} '{p}' holds {arr.dtype} values, not integer node IDs; {_FIX}")
    return np.ascontiguousarray(arr, dtype=np.int64)


#: The bytes of a block :func:`_fast_pairs` parses at once; a block with any other goes line by
#: line. ``_IN_FIELD[b]``: byte ``b`` belongs to a field (a digit or a sign), not a separator.
_PLAIN = b"0123456789+-, \t\r\n"
_IN_FIELD = np.ones(256, dtype=bool)
_IN_FIELD[list(b", \t\r\n")] = False
#: Digits an ID may have to be parsed at once (more could pass int64; they go line by line).
_FAST_DIGITS = 18


def _fast_pairs(lines: list[bytes], num_nodes: int) -> np.ndarray | None:
    """The pairs of ``lines`` parsed in one go, or ``None`` when some line needs a closer look.

    Taken at once: only digits, signs and separators; every field a sign (optional) and at most
    18 digits; on every line two fields, or none and no comma (checked with array operations
    over the bytes, then parsed by numpy). Anything else (a comment, a header, a bad line, an ID
    outside ``[0, N)``) goes to :func:`_slow_pairs`, which reads such lines the same way.
    """
    text = b"\n".join(lines) + b"\n"
    if text.translate(None, _PLAIN):
        return None
    raw = np.frombuffer(text, dtype=np.uint8)
    field = _IN_FIELD[raw]
    starts = field.copy()
    starts[1:] &= ~field[:-1]  # the first byte of each field
    ends = field.copy()
    ends[:-1] &= ~field[1:]  # the last byte of each field
    sign = (raw == ord("+")) | (raw == ord("-"))
    if (sign & ~starts).any() or (sign & ends).any():
        return None  # '1-2', '+-3', a sign alone
    first, last = np.flatnonzero(starts), np.flatnonzero(ends)
    if (last - first + 1 - sign[first] > _FAST_DIGITS).any():
        return None
    newline = raw == ord("\n")
    line = np.cumsum(newline) - newline  # each byte's line, its line end included
    per_line = np.bincount(line[starts], minlength=len(lines))
    commas = np.bincount(line[raw == ord(",")], minlength=len(lines))
    if ((per_line != 0) & (per_line != 2)).any() or ((per_line == 0) & (commas > 0)).any():
        return None  # a line of three fields, or of one; a line of commas alone is not blank
    ids = np.fromstring(text.replace(b",", b" "), dtype=np.int64, sep=" ")
    if ids.size != first.size:
        return None
    ids = ids.reshape(-1, 2)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        return None
    return ids


def _slow_pairs(
    lines: list[bytes], first: int, header: bool, p: Path, arg: str, num_nodes: int
) -> tuple[np.ndarray, bool]:
    """The pairs of ``lines`` (the first numbered ``first``), line by line.

    A refusal names its line. ``header``: the file's first content line (which may be a header)
    is still to come. Returns the pairs and that flag after these lines.
    """
    row: list[int] = []
    for number, raw in enumerate(lines, start=first):
        text = raw.split(b"#", 1)[0].strip() if b"#" in raw else raw.strip()
        if not text:
            continue
        fields = text.replace(b",", b" ").split()
        maybe_header, header = header, False
        try:
            if len(fields) != 2:
                raise ValueError
            a, b = int(fields[0]), int(fields[1])
        except ValueError:
            if maybe_header and len(fields) == 2 and not any(_is_int(x) for x in fields):
                continue  # a header line such as src,dst
            try:
                shown = text.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(
                    f"{arg} '{p}' is not a text file (and not .npy); {_FIX}, as text/CSV or .npy"
                ) from None
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            only = "" if maybe_header else " (only the first line may be a header)"
            raise ConfigError(
                f"{arg} '{p}' line {number}: {shown!r} is not two integer node IDs{only}; {_FIX}"
            ) from None
        for v in (a, b):
            if not 0 <= v < num_nodes:  # also IDs past int64, before any conversion
                raise ConfigError(_outside(arg, p, v, f"line {number}", num_nodes))
        row += (a, b)
    return np.array(row, dtype=np.int64).reshape(-1, 2), header


def _read_text(p: Path, arg: str, num_nodes: int) -> np.ndarray:
    """A text file's pairs: a block of plain lines at once, any other block line by line.

    The lines are counted first (one pass, a block at a time), so the pairs go into one array
    of that many rows: memory is the result plus a block's work, not the blocks and their copy.
    """
    out = np.empty((0, 2), dtype=np.int64)
    filled = 0
    header = True  # the first line with content may be a header

    def too_long(number: int) -> ConfigError:
        return ConfigError(
            f"{arg} '{p}' line {number} is longer than {MAX_LINE_BYTES} bytes, not a pair of "
            f"node IDs; {_FIX}"
        )

    try:
        with open(p, "rb") as f:
            rows = 1
            while block := f.read(BLOCK_BYTES):
                rows += block.count(b"\n")
            f.seek(0)
            out = np.empty((rows, 2), dtype=np.int64)
            for first, lines in block_lines(f, BLOCK_BYTES, MAX_LINE_BYTES, too_long):
                pieces = [(first, lines)]
                if header:  # only the first content line goes line by line for being a header
                    content = (i + 1 for i, x in enumerate(lines) if x.split(b"#", 1)[0].strip())
                    k = next(content, len(lines))  # the lines up to it, it included
                    pieces = [(first, lines[:k]), (first + k, lines[k:])]
                for start, part in pieces:
                    ids = None if header or not part else _fast_pairs(part, num_nodes)
                    if ids is None:
                        ids, header = _slow_pairs(part, start, header, p, arg, num_nodes)
                    if filled + len(ids) > len(out):  # the file grew since it was counted
                        out = np.concatenate([out[:filled], np.empty_like(out)])
                    out[filled : filled + len(ids)] = ids
                    filled += len(ids)
    except OSError as e:
        raise ConfigError(f"{arg} '{p}' cannot be read ({e.strerror}); {_FIX}") from None
    return out[:filled]


def _is_int(text: bytes) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


__all__ = ["read_pairs"]
