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

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from fleetgnn.config.textfile import path_kind
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
        kind = path_kind(p)
        found = "does not exist" if kind == "missing" else f"is {kind}, not a regular file"
        raise ConfigError(f"{arg} '{p}' {found}; {_FIX}")
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


def _lines(f: BinaryIO, p: Path, arg: str) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` of an open binary file, read in blocks of :data:`BLOCK_BYTES`.

    A line longer than :data:`MAX_LINE_BYTES` is refused before more of it is read.
    """
    carry, number = b"", 0
    while block := f.read(BLOCK_BYTES):
        parts = (carry + block).split(b"\n")
        carry = parts.pop()
        for line in parts:
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise ConfigError(_too_long(arg, p, number))
            yield number, line
        if len(carry) > MAX_LINE_BYTES:
            raise ConfigError(_too_long(arg, p, number + 1))
    if carry:
        yield number + 1, carry


def _too_long(arg: str, p: Path, number: int) -> str:
    return (
        f"{arg} '{p}' line {number} is longer than {MAX_LINE_BYTES} bytes, not a pair of node "
        f"IDs; {_FIX}"
    )


def _read_text(p: Path, arg: str, num_nodes: int) -> np.ndarray:
    blocks: list[np.ndarray] = []
    row: list[int] = []
    first = True  # the first line with content may be a header
    try:
        with open(p, "rb") as f:
            for number, raw in _lines(f, p, arg):
                text = raw.split(b"#", 1)[0].strip() if b"#" in raw else raw.strip()
                if not text:
                    continue
                fields = text.replace(b",", b" ").split()
                header, first = first, False
                try:
                    if len(fields) != 2:
                        raise ValueError
                    a, b = int(fields[0]), int(fields[1])
                except ValueError:
                    if header and len(fields) == 2 and not any(_is_int(x) for x in fields):
                        continue  # a header line such as src,dst
                    try:
                        shown = text.decode("utf-8")
                    except UnicodeDecodeError:
                        raise ConfigError(
                            f"{arg} '{p}' is not a text file (and not .npy); {_FIX}, as text/CSV "
                            f"or .npy"
                        ) from None
                    shown = shown if len(shown) <= 60 else shown[:57] + "..."
                    only = "" if header else " (only the first line may be a header)"
                    raise ConfigError(
                        f"{arg} '{p}' line {number}: {shown!r} is not two integer node IDs"
                        f"{only}; {_FIX}"
                    ) from None
                for v in (a, b):
                    if not 0 <= v < num_nodes:  # also IDs past int64, before any conversion
                        raise ConfigError(_outside(arg, p, v, f"line {number}", num_nodes))
                row += (a, b)
                if len(row) >= 1 << 17:
                    blocks.append(np.array(row, dtype=np.int64))
                    row = []
    except OSError as e:
        raise ConfigError(f"{arg} '{p}' cannot be read ({e.strerror}); {_FIX}") from None
    blocks.append(np.array(row, dtype=np.int64))
    return np.concatenate(blocks).reshape(-1, 2)


def _is_int(text: bytes) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


__all__ = ["read_pairs"]
