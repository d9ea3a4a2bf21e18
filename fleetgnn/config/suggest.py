"""Which valid name a mistyped one meant: the one "did you mean" of the CLI and the configs."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["nearest"]


def _edits(a: str, b: str) -> int:
    """Edits turning ``a`` into ``b``: insertions, deletions, substitutions, adjacent swaps."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)  # a swap is one typo ("gnc")
    return d[len(a)][len(b)]


def nearest(value: str, choices: Iterable[Any]) -> str | None:
    """The valid choice closest to a mistyped ``value``, or ``None`` if none is close.

    Fewest typing edits first (a swap of two letters counts as one: ``gnc`` -> ``gcn``, not
    ``gin``), ties broken by :mod:`difflib`'s similarity; otherwise difflib's closest match.
    """
    value, names = str(value), [str(c) for c in choices]
    scored = sorted(
        (_edits(value.lower(), n.lower()), -difflib.SequenceMatcher(None, value, n).ratio(), n)
        for n in names
    )
    if scored and scored[0][0] <= max(2, len(value) // 3):
        return scored[0][2]
    close = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
    return close[0] if close else None
