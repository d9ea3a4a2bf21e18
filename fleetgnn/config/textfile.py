"""Bounded reading of the text files and values a user hands fleetgnn.

Every text input (config files and ``--set`` values, ``store.topology`` and hardware profile
files, split files, a run's ``config.yaml`` and ``metrics.jsonl`` on ``--resume``) goes through
the functions here, so a hostile or damaged input ends in one line naming it, never a hang, a
traceback or gigabytes of memory:

==========================  =========================================================
input                       refused (one line, the caller's error class)
==========================  =========================================================
not a regular file          FIFOs, devices, sockets, directories (and links to them);
                            checked with ``stat`` before opening, and the file is
                            opened non-blocking, so a FIFO never hangs
larger than ``max_bytes``   before reading (and if it grows while read)
not UTF-8                   naming the offset of the first bad byte
YAML anchors and aliases    ``&a`` / ``*a``: refused when met, before any expansion
                            (an alias "bomb" of a few hundred bytes never grows)
YAML tags                   ``!!python/object``, ``!!binary``, ``!foo``: a config has
                            no use for them
deep or huge YAML           more than ``max_depth`` nested lists/mappings or
                            ``max_nodes`` values, counted while composing
invalid YAML / JSON         the parser's problem and position, on one line
==========================  =========================================================
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from fleetgnn.errors import ConfigError, FleetgnnError
from fleetgnn.types import PathLikeStr

#: Largest config, topology or hardware profile file read (bytes).
MAX_YAML_BYTES = 1 << 20
#: Deepest nesting of lists/mappings accepted in YAML.
MAX_YAML_DEPTH = 32
#: Most values (scalars, lists and mappings) one YAML text may hold.
MAX_YAML_NODES = 100_000

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


def path_kind(path: PathLikeStr) -> str:
    """What ``path`` is, for messages (``"missing"`` when nothing is there).

    E.g. ``"a FIFO (named pipe)"``, ``"a directory"``, ``"a regular file"``, ``"a character
    device (a symbolic link to '/dev/zero')"``, ``"a broken symbolic link (to 'x')"``. Never
    opens the path (a FIFO would block, a device could be read forever).
    """
    try:
        st = os.lstat(path)
    except OSError:
        return "missing"
    link = ""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        try:
            st = os.stat(path)
        except OSError:
            return f"a broken symbolic link (to '{target}')"
        link = f" (a symbolic link to '{target}')"
    kind = "a regular file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
    return kind + link


def not_a_file(path: PathLikeStr) -> str:
    """Why ``path`` is not a regular file to read, for messages (after the path).

    ``"does not exist"``, or ``"is <its kind>, not a regular file"`` (:func:`path_kind`).
    """
    kind = path_kind(path)
    return "does not exist" if kind == "missing" else f"is {kind}, not a regular file"


def block_lines(
    f: BinaryIO, block_bytes: int, max_line: int, too_long: Callable[[int], Exception]
) -> Iterator[tuple[int, list[bytes]]]:
    """``(number of the first line, lines)`` of an open binary file, a block at a time.

    Each block of ``block_bytes`` gives its whole lines (without line ends); the last line,
    when it has no line end, comes alone at the end. A line longer than ``max_line`` bytes
    raises ``too_long(its 1-based number)`` before more of it is read, so a file without line
    ends costs a block, not its size.
    """
    carry, number = b"", 1
    while block := f.read(block_bytes):
        lines = (carry + block).split(b"\n")
        carry = lines.pop()
        if lines and max(map(len, lines)) > max_line:
            raise too_long(number + next(i for i, x in enumerate(lines) if len(x) > max_line))
        if len(carry) > max_line:
            raise too_long(number + len(lines))
        if lines:
            yield number, lines
            number += len(lines)
    if carry:
        yield number, [carry]


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def _name(what: str, path: PathLikeStr) -> str:
    return f"{what} '{path}'" if what else f"'{path}'"


def _tail(fix: str) -> str:
    return f"; {fix}" if fix else ""


def read_bytes(
    path: PathLikeStr,
    what: str,
    *,
    max_bytes: int,
    error: type[FleetgnnError] = ConfigError,
    fix: str = "",
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` bytes.

    The path is ``stat``-ed first (following links) and only a regular file is opened, with
    ``O_NONBLOCK``; its descriptor is checked again, so a file swapped for a FIFO in between
    cannot block the read either.

    Args:
        path: The file.
        what: What the file is, for messages (``"config file"``, ``"'store.topology' file"``;
            ``""``: the path alone).
        max_bytes: Largest size accepted.
        error: The error class raised.
        fix: What to do about it, appended to every message.

    Raises:
        error: The file cannot be read, is not a regular file or is larger than ``max_bytes``.
    """
    p = Path(path)
    name = f"{what} '{p}'" if what else f"'{p}'"
    fd = -1
    chunks: list[bytes] = []
    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{name} is {_kind(st.st_mode)}, not a regular file{_tail(fix)}")
        if st.st_size > max_bytes:
            raise error(
                f"{name} is {st.st_size} bytes, more than the {_size(max_bytes)} it may "
                f"have{_tail(fix)}"
            )
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
        fd = os.open(p, flags | getattr(os, "O_CLOEXEC", 0))
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise error(f"{name} is not a regular file{_tail(fix)}")
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise error(f"{name} cannot be read ({e.strerror or e}){_tail(fix)}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise error(f"{name} is more than the {_size(max_bytes)} it may have{_tail(fix)}")
    return data


def decode_utf8(
    data: bytes, where: str, *, error: type[FleetgnnError] = ConfigError, fix: str = ""
) -> str:
    """``data`` decoded as UTF-8, or one line naming the offset of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = data[e.start : e.start + 1]
        tail = _tail(fix or "save it as UTF-8")
        raise error(f"{where} is not UTF-8 text (byte {bad!r} at offset {e.start}){tail}") from None


def read_text(
    path: PathLikeStr,
    what: str,
    *,
    max_bytes: int,
    error: type[FleetgnnError] = ConfigError,
    fix: str = "",
) -> str:
    """:func:`read_bytes` decoded as UTF-8 (same arguments; one line on a bad byte)."""
    data = read_bytes(path, what, max_bytes=max_bytes, error=error, fix=fix)
    return decode_utf8(data, _name(what, path), error=error, fix=fix)


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` refusing anchors, aliases and tags, and counting depth and values.

    The checks run in ``compose_node``, as the parser's events arrive: nothing is expanded,
    nested or constructed past a limit.
    """

    def __init__(self, text: str, where: str, error: type[FleetgnnError]) -> None:
        super().__init__(text)
        self.where, self.error = where, error
        self.depth = self.nodes = 0
        self.max_depth, self.max_nodes = MAX_YAML_DEPTH, MAX_YAML_NODES

    def _at(self, event: Any) -> str:
        mark = getattr(event, "start_mark", None)
        return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent) or anchor is not None:
            sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
            raise self.error(
                f"{self.where} uses a YAML {'alias' if sign == '*' else 'anchor'} "
                f"'{sign}{str(anchor)[:40]}'{self._at(event)}; anchors and aliases are not "
                f"allowed: write the value out in full"
            )
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise self.error(
                f"{self.where} uses the YAML tag {str(tag)[:60]!r}{self._at(event)}; tags are not "
                f"allowed: write plain values"
            )
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise self.error(
                f"{self.where} holds more than {self.max_nodes} values; it is not a fleetgnn input"
            )
        nested = isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent))
        if nested:
            self.depth += 1
            if self.depth > self.max_depth:
                raise self.error(
                    f"{self.where} nests lists or mappings more than {self.max_depth} levels "
                    f"deep{self._at(event)}; a fleetgnn input needs at most a few levels"
                )
        try:
            return super().compose_node(parent, index)
        finally:
            if nested:
                self.depth -= 1


def _yaml_problem(e: yaml.YAMLError) -> str:
    problem = getattr(e, "problem", None) or getattr(e, "context", None) or str(e)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return " ".join(f"{problem}{at}".split())[:300]


def parse_yaml(
    text: str,
    where: str,
    *,
    error: type[FleetgnnError] = ConfigError,
    fix: str = "",
    invalid_as_text: bool = False,
) -> Any:
    """The value of one YAML document, parsed with the bounds of this module.

    Args:
        text: The YAML text.
        where: What it is, for messages (``"config file 'c.yaml'"``, ``"--set train.fanouts"``).
        error: The error class raised.
        fix: What to do about invalid YAML, appended to that message.
        invalid_as_text: Return ``text`` itself when it is not valid YAML (a command-line value
            such as an unbalanced bracket); the bounds are enforced all the same.

    Raises:
        error: Invalid YAML (the problem and its position), an anchor, alias or tag, or more
            than :data:`MAX_YAML_DEPTH` levels or :data:`MAX_YAML_NODES` values.
    """
    loader = _BoundedLoader(text, where, error)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as e:
        if invalid_as_text:
            return text
        raise error(f"{where} is not valid YAML ({_yaml_problem(e)}){_tail(fix)}") from None
    except RecursionError:  # defensive: the depth bound is far below the recursion limit
        raise error(f"{where} nests too deeply to be read{_tail(fix)}") from None
    finally:
        loader.dispose()


def load_yaml_file(
    path: PathLikeStr,
    what: str,
    *,
    max_bytes: int = MAX_YAML_BYTES,
    error: type[FleetgnnError] = ConfigError,
    fix: str = "",
) -> Any:
    """:func:`read_text` then :func:`parse_yaml` (``what`` as in :func:`read_bytes`)."""
    text = read_text(path, what, max_bytes=max_bytes, error=error, fix=fix)
    return parse_yaml(text, _name(what, path), error=error, fix=fix)


def parse_json(
    text: str | bytes, where: str, *, error: type[FleetgnnError] = ConfigError, fix: str = ""
) -> Any:
    """``json.loads(text)`` with its failures (bad JSON, bad UTF-8, too deep) as one line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(
            f"{where} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}){_tail(fix)}"
        ) from None
    except UnicodeDecodeError as e:
        raise error(f"{where} is not UTF-8 text (offset {e.start}){_tail(fix)}") from None
    except RecursionError:
        raise error(f"{where} nests too deeply to be read{_tail(fix)}") from None
    except ValueError as e:
        raise error(f"{where} is not valid JSON ({str(e)[:200]}){_tail(fix)}") from None


def load_json_file(
    path: PathLikeStr,
    what: str,
    *,
    max_bytes: int,
    error: type[FleetgnnError] = ConfigError,
    fix: str = "",
) -> Any:
    """:func:`read_text` then :func:`parse_json` (``what`` as in :func:`read_bytes`)."""
    text = read_text(path, what, max_bytes=max_bytes, error=error, fix=fix)
    return parse_json(text, _name(what, path), error=error, fix=fix)
