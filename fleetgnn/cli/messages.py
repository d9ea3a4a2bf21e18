"""How the CLI words what it prints: one-line warnings and one-line errors."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_ERROR_CHARS", "one_line", "one_line_warning_format", "one_line_warnings"]


def one_line_warning_format(command: str) -> Any:
    """A ``warnings.formatwarning`` printing ``fleetgnn COMMAND: warning: MESSAGE``, one line."""

    def fmt(message: Any, category: Any, filename: str, lineno: int, line: Any = None) -> str:
        return f"fleetgnn {command}: warning: {' '.join(str(message).split())}\n"

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
    text = " ".join(message.split())
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"{text[: limit * 3 // 4]} ... [{cut} characters cut] ... {text[-(limit // 4) :]}"
