"""How the CLI words what it prints: one-line warnings and one-line errors."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = [
    "MAX_ERROR_CHARS",
    "one_line",
    "one_line_warning_format",
    "one_line_warnings",
    "printable",
]


def printable(text: str) -> str:
    r"""``text`` with the undecodable bytes of a path (lone surrogates) written as ``\xNN``.

    A path given in bytes that are not UTF-8 reaches Python with each such byte as a lone
    surrogate (``surrogateescape``), which a UTF-8 stream refuses to print; this shows the byte.
    """
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def one_line_warning_format(command: str) -> Any:
    """A ``warnings.formatwarning`` printing ``fleetgnn COMMAND: warning: MESSAGE``, one line."""

    def fmt(message: Any, category: Any, filename: str, lineno: int, line: Any = None) -> str:
        return f"fleetgnn {command}: warning: {printable(' '.join(str(message).split()))}\n"

    return fmt


@contextlib.contextmanager
def one_line_warnings(command: str) -> Iterator[None]:
    """Show warnings as ``fleetgnn COMMAND: warning: MESSAGE`` (no source line) in the block."""
    saved = warnings.formatwarning
    warnings.formatwarning = one_line_warning_format(command)
    try:
        yield
    finally:
        warnings.formatwarning = saved


#: Longest error line printed; longer messages keep their head and tail.
MAX_ERROR_CHARS = 2000


def one_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``message`` on one line (whitespace runs collapsed), at most ``limit`` characters."""
    text = printable(" ".join(message.split()))
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"{text[: limit * 3 // 4]} ... [{cut} characters cut] ... {text[-(limit // 4) :]}"
