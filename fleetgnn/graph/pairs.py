"""Node pairs from a file: what ``fleetgnn predict --task link --pairs FILE`` scores.

Formats (by suffix):

=========================  ==============================================================
file                       layout
=========================  ==============================================================
``.npy``                   an integer array ``[P, 2]`` (or ``[2, P]`` with ``P != 2``)
anything else (text/CSV)   one pair per line: two node IDs separated by a comma, tabs or
                           spaces; ``#`` starts a comment; a first line that is not two
                           integers (a header such as ``src,dst``) is skipped
=========================  ==============================================================

Node IDs are the dataset's (its original numbering), in ``[0, N)``. Every refusal is one line
naming the file, and for text files the line.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from fleetgnn.errors import ConfigError
from fleetgnn.types import PathLikeStr

_SEP = re.compile(r"[,\s]+")
_FIX = "give two columns of node IDs (source, destination), one pair per row"


def read_pairs(path: PathLikeStr, num_nodes: int, *, arg: str = "--pairs") -> np.ndarray:
    """The pairs of ``path`` as int64 ``[P, 2]``, checked against ``num_nodes``.

    Args:
        path: A ``.npy`` file or a text/CSV file (see the module docstring).
        num_nodes: The dataset's node count ``N``; IDs must be in ``[0, N)``.
        arg: The argument's name in messages.

    Raises:
        ConfigError: A missing or unreadable file, the wrong shape or dtype, no pairs, or an ID
            outside ``[0, N)`` (one line).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{arg} '{p}' does not exist (or is not a file); {_FIX}")
    pairs = _read_npy(p, arg) if p.suffix == ".npy" else _read_text(p, arg)
    if pairs.shape[0] == 0:
        raise ConfigError(f"{arg} '{p}' holds no pairs; {_FIX}")
    lo, hi = int(pairs.min()), int(pairs.max())
    if lo < 0 or hi >= num_nodes:
        bad = lo if lo < 0 else hi
        row = int(np.argwhere((pairs == bad).any(axis=1))[0, 0])
        where = f"line {_line_of(p, row)}" if p.suffix != ".npy" else f"row {row}"
        raise ConfigError(
            f"{arg} '{p}': node ID {bad} ({where}) is outside [0, {num_nodes}): the dataset has "
            f"{num_nodes} nodes; use its node IDs"
        )
    return pairs


def _read_npy(p: Path, arg: str) -> np.ndarray:
    try:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        detail = " ".join(str(e).split())[:200]
        raise ConfigError(f"{arg} '{p}' is not a readable .npy file ({detail}); {_FIX}") from None
    if arr.ndim == 2 and arr.shape[0] == 2 and arr.shape[1] != 2:
        arr = arr.T  # [2, P], the edge_index layout
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ConfigError(f"{arg} '{p}' has shape {tuple(arr.shape)}, not [P, 2]; {_FIX}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"{arg} '{p}' holds {arr.dtype} values, not integer node IDs; {_FIX}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _read_text(p: Path, arg: str) -> np.ndarray:
    rows: list[tuple[int, int]] = []
    try:
        with open(p, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                text = line.split("#", 1)[0].strip()
                if not text:
                    continue
                fields = [x for x in _SEP.split(text) if x]
                try:
                    if len(fields) != 2:
                        raise ValueError
                    rows.append((int(fields[0]), int(fields[1])))
                except ValueError:
                    if not rows and len(fields) == 2 and not any(_is_int(x) for x in fields):
                        continue  # a header line
                    shown = text if len(text) <= 60 else text[:57] + "..."
                    raise ConfigError(
                        f"{arg} '{p}' line {number}: {shown!r} is not two integer node IDs; {_FIX}"
                    ) from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{arg} '{p}' is not a text file (and not .npy); {_FIX}, as text/CSV or .npy"
        ) from None
    except OSError as e:
        raise ConfigError(f"{arg} '{p}' cannot be read ({e.strerror}); {_FIX}") from None
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _line_of(p: Path, row: int) -> int:
    """The 1-based line of a text file's ``row``-th pair (0-based), for messages."""
    seen = -1
    header = True
    with open(p, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            fields = [x for x in _SEP.split(line.split("#", 1)[0].strip()) if x]
            if not fields:
                continue
            if header and not all(_is_int(x) for x in fields):
                continue
            header = False
            seen += 1
            if seen == row:
                return number
    return row + 1


__all__ = ["read_pairs"]
