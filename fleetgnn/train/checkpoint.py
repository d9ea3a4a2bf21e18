"""Checkpoints: atomic saves, safe loads, RNG capture, and a two-file retention scheme.

A checkpoint is a ``dict`` holding only tensors, numbers, strings, ``None``, lists, tuples and
dicts, so it loads with ``torch.load(weights_only=True)`` (no arbitrary unpickling). RNG states are
converted to that form by :func:`capture_rng`.

Retention (:class:`CheckpointDir`)::

    RUN_DIR/checkpoints/last.pt   the newest complete checkpoint
    RUN_DIR/checkpoints/prev.pt   the one before it
    RUN_DIR/checkpoints/best.pt   the end of the best-validation epoch (the one the summary reports)

A save serializes the state in memory, writes it to ``.last.pt.<pid>-<tag>-<random>.tmp`` in the
same directory (its space reserved first, so a full disk is a one-line
:class:`~fleetgnn.errors.DiskFullError`; the name lets a later run sweep it once its writer is
gone, see :mod:`fleetgnn.graph.files`), flushed and fsynced, then renames
``last.pt`` to ``prev.pt`` and the temporary file to ``last.pt`` (both ``os.replace``, atomic on
POSIX). A crash at any point leaves at least one complete checkpoint: before the first rename both
old files are intact; between the renames ``prev.pt`` holds the previous ``last.pt``. Loading tries
``last.pt`` first and falls back to ``prev.pt`` when ``last.pt`` is missing or unreadable, or
holds the wrong things (a ``check`` the caller passes to :meth:`CheckpointDir.load_latest`).
Load errors never pass on torch's advice to unpickle fully (``weights_only=False``): that would
run whatever code a hostile file holds.

A save with ``best=True`` first makes the same file ``best.pt`` (a hard link to the temporary file
renamed over ``best.pt``, or a second atomic write where links are not supported), so ``best.pt``
is never older than the ``last.pt`` that records its epoch as the best: a crash in between leaves
an older ``last.pt``, and the resumed run writes ``best.pt`` again when it reaches that epoch.
A save with ``best_state`` (an earlier state kept in memory: the best epoch's, when no checkpoint
was due at its end) writes that state to ``best.pt`` first, with the same guarantee.

When to save is the caller's choice: :class:`~fleetgnn.train.Trainer` saves every
``train.checkpoint_every`` steps, at the first epoch end ``train.checkpoint_interval`` seconds
after the last save, at the run's end and on an interrupt.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import random
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.errors import ConfigError, FleetgnnError
from fleetgnn.graph.dataset import fsync_dir
from fleetgnn.graph.files import disk_full_as_error, refresh_free, temp_file, write_reserved
from fleetgnn.types import PathLikeStr


class CheckpointError(FleetgnnError):
    """A checkpoint file is missing, truncated, corrupt or has unexpected contents."""


#: The end of a disk-full message about a checkpoint.
DISK_FULL_FIX = (
    "free some space there, then continue with --resume (the latest checkpoint, if any, is intact)"
)


def _temp_sibling(path: Path) -> Path:
    """An empty ``.NAME.<pid>-<tag>-<random>.tmp`` next to ``path`` (swept once its owner dies)."""
    return temp_file(path)


def _serialize(state: Mapping[str, Any]) -> memoryview:
    """``torch.save(dict(state))`` into memory, so its size is known before the disk is touched."""
    buf = io.BytesIO()
    torch.save(dict(state), buf)
    return buf.getbuffer()


def _write_temp_checkpoint(path: Path, data: Any) -> Path:
    """Write serialized ``data`` to a new temporary sibling of ``path`` (space reserved, fsynced).

    Raises:
        DiskFullError: Not enough space (the temporary file is removed).
    """
    with disk_full_as_error(path.parent, memoryview(data).nbytes, DISK_FULL_FIX):
        tmp = _temp_sibling(path)
    try:
        write_reserved(tmp, data, DISK_FULL_FIX)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        refresh_free(e)
        raise
    return tmp


def save_checkpoint(path: PathLikeStr, state: Mapping[str, Any]) -> Path:
    """Save ``state`` to ``path`` atomically: a reader sees the old file or the new one, whole.

    The state is serialized in memory, then written to a temporary file in the same directory
    (its space reserved first), flushed and fsynced, and renamed over ``path`` with
    ``os.replace``. On any failure the temporary file is removed and ``path`` is untouched; a full
    disk is a one-line :class:`~fleetgnn.errors.DiskFullError`.

    Args:
        path: Target file (parent directories are created).
        state: Tensors, numbers, strings, ``None``, and lists/tuples/dicts of them.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    p = Path(path)
    tmp = _write_temp_checkpoint(p, _serialize(state))
    try:
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(p.parent)
    return p


def load_checkpoint(path: PathLikeStr, *, mmap: bool = False) -> dict[str, Any]:
    """Load a checkpoint with ``torch.load(weights_only=True, map_location='cpu')``.

    Args:
        path: The checkpoint file.
        mmap: Map the tensors' storage from the file instead of reading it (cheap when only the
            small entries, e.g. the trainer state, are needed).

    Raises:
        CheckpointError: The file is missing, truncated or corrupt, holds objects outside the
            weights-only allow-list, or is not a dict.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(
            f"checkpoint '{p}' does not exist; start without --resume or point at a run directory "
            f"that has checkpoints/last.pt"
        )
    # The file is opened here, by Python (bytes-safe: a name that is not valid UTF-8 opens as any
    # other), so a failure to open or read it is never taken for a fault in its contents.
    try:
        f = open(p, "rb")  # noqa: SIM115 (closed below, after torch has read it)
    except OSError as e:
        raise CheckpointError(_unread(p, e)) from e
    with f:
        try:
            if mmap and _utf8_path(p):  # torch maps a path it encodes as UTF-8
                state = torch.load(p, map_location="cpu", weights_only=True, mmap=True)
            else:
                state = torch.load(f, map_location="cpu", weights_only=True)
        except (OSError, UnicodeEncodeError) as e:  # the file system's fault, not the file's
            raise CheckpointError(_unread(p, e)) from e
        except pickle.UnpicklingError as e:  # what the weights-only unpickler refuses
            raise CheckpointError(
                f"checkpoint '{p}' ({_size(p)} bytes) holds objects other than tensors and plain "
                f"values ({_load_detail(e) or 'refused by the weights-only unpickler'}); it is "
                f"refused, since loading it could run code: the file is truncated or corrupt, or "
                f"was not written by fleetgnn; delete it to fall back to the previous checkpoint, "
                f"or start a fresh run"
            ) from e
        except Exception as e:  # torch raises RuntimeError, EOFError, ...
            detail = _load_detail(e)
            raise CheckpointError(
                f"checkpoint '{p}' ({_size(p)} bytes) is truncated or corrupt and cannot be "
                f"loaded ({type(e).__name__}{': ' + detail if detail else ''}); delete it to fall "
                f"back to the previous checkpoint, or start a fresh run"
            ) from e
    if not isinstance(state, dict):
        raise CheckpointError(
            f"checkpoint '{p}' holds a {type(state).__name__}, expected a dict; it was not "
            f"written by fleetgnn"
        )
    return state


def _utf8_path(path: Path) -> bool:
    """Whether ``path`` encodes as UTF-8 (a name with undecodable bytes holds surrogates)."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unread(path: Path, err: BaseException) -> str:
    """One line for a checkpoint that could not be opened or read: its contents are not judged."""
    reason = err.strerror if isinstance(err, OSError) and err.strerror else _load_detail(err)
    return (
        f"checkpoint '{path}' cannot be read ({type(err).__name__}: {reason}); its contents were "
        f"not checked and may be intact, so keep it: fix the path or its permissions, or copy "
        f"the run directory to a plain ASCII path and resume from there"
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Lines of torch's load errors that are advice, not facts; advice to unpickle fully (which can
#: run code) is never passed on.
_ADVICE = ("weights_only", "safe_globals", "trust", "documentation", "allowlist", "two options")


def _load_detail(err: BaseException, limit: int = 200) -> str:
    """The factual part of a ``torch.load`` error, one line, without torch's advice."""
    text = _ANSI.sub("", str(err))
    for line in text.splitlines():
        line = " ".join(line.split())
        line = line.removeprefix("WeightsUnpickler error: ").split(" Please use ", 1)[0]
        line = line.split(". This is an internal", 1)[0].split(". If you are seeing", 1)[0]
        if line and not any(a in line for a in _ADVICE):
            line = line.rstrip(".")
            return line if len(line) <= limit else line[:limit] + "..."
    m = re.search(r"Unsupported global: GLOBAL [\w.]+", text)
    return m.group(0) if m else ""


def first_non_finite(state: Any) -> str | None:
    """The key path (``model.conv.weight``) of a floating tensor of ``state`` holding NaN or inf.

    ``None`` when all are finite. Walks dicts, lists and tuples; one device synchronisation per
    device the tensors are on.
    """
    found: list[tuple[str, torch.Tensor]] = []

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point() or obj.is_complex():
                found.append((path, torch.isfinite(obj.detach()).all()))
        elif isinstance(obj, Mapping):
            for k, v in obj.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(obj, list | tuple):
            for i, v in enumerate(obj):
                walk(v, f"{path}.{i}" if path else str(i))

    walk(state, "")
    by_device: dict[torch.device, list[int]] = {}
    for i, (_, flag) in enumerate(found):
        by_device.setdefault(flag.device, []).append(i)
    for idx in by_device.values():
        ok = torch.stack([found[i][1] for i in idx]).cpu()
        if not bool(ok.all()):
            return found[idx[int((~ok).nonzero()[0])]][0]
    return None


class CheckpointDir:
    """A run's checkpoints: the newest two (``last.pt``, ``prev.pt``) and ``best.pt``.

    Args:
        directory: Usually ``RUN_DIR/checkpoints``; created on the first save.
    """

    LAST = "last.pt"
    PREV = "prev.pt"
    BEST = "best.pt"

    def __init__(self, directory: PathLikeStr) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"CheckpointDir({str(self.directory)!r})"

    @property
    def last(self) -> Path:
        """Path of the newest checkpoint."""
        return self.directory / self.LAST

    @property
    def prev(self) -> Path:
        """Path of the checkpoint before the newest."""
        return self.directory / self.PREV

    @property
    def best(self) -> Path:
        """Path of the best-validation epoch's checkpoint."""
        return self.directory / self.BEST

    def save(
        self,
        state: Mapping[str, Any],
        *,
        best: bool = False,
        best_state: Mapping[str, Any] | None = None,
    ) -> Path:
        """Save ``state`` as ``last.pt``, keeping the former ``last.pt`` as ``prev.pt``.

        Args:
            state: The checkpoint (see :func:`save_checkpoint`).
            best: Also make it ``best.pt`` (atomically, before ``last.pt``; see the module
                docstring).
            best_state: An earlier checkpoint to make ``best.pt`` (written atomically before
                ``last.pt``); ignored when ``best`` is set.

        Returns:
            The path of ``last.pt``.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        if best_state is not None and not best:
            save_checkpoint(self.best, best_state)
        data = _serialize(state)
        tmp = _write_temp_checkpoint(self.last, data)
        try:
            if best:
                self._replace_best(tmp, data)
            if self.last.exists():
                os.replace(self.last, self.prev)
            os.replace(tmp, self.last)
        except BaseException as e:
            tmp.unlink(missing_ok=True)
            refresh_free(e)
            raise
        fsync_dir(self.directory)
        return self.last

    def _replace_best(self, written: Path, data: Any) -> None:
        """Make ``best.pt`` the complete file ``written`` (a hard link renamed into place)."""
        link = _temp_sibling(self.best)
        link.unlink()
        try:
            os.link(written, link)
        except OSError:  # no hard links here (some network or FUSE file systems): write a copy
            link = _write_temp_checkpoint(self.best, data)
        try:
            os.replace(link, self.best)
        except BaseException:
            link.unlink(missing_ok=True)
            raise

    def candidates(self) -> list[Path]:
        """The checkpoints to try, newest first: those of ``last.pt``, ``prev.pt`` that exist."""
        return [p for p in (self.last, self.prev) if p.exists()]

    def load_latest(
        self,
        *,
        mmap: bool = False,
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any] | None:
        """The newest loadable checkpoint, or ``None`` when there is none.

        Falls back to ``prev.pt`` (with a warning naming what was wrong with ``last.pt``) when
        ``last.pt`` is missing, unreadable, or loads but fails ``check``. A ``last.pt`` that
        ``check`` finds to belong to another config (a :class:`~fleetgnn.errors.ConfigError`: a
        file copied in from another run, say) falls back too when ``prev.pt`` fits; when no
        checkpoint fits, that ConfigError is raised, since then it is the user's config that
        changed.

        Args:
            mmap: Map tensor storage from the file (see :func:`load_checkpoint`).
            check: Called with each loaded checkpoint; raises :class:`CheckpointError` when the
                contents are not what the caller expects, or :class:`ConfigError` when they were
                written with another config (the next checkpoint is tried either way).

        Raises:
            ConfigError: Checkpoints exist, none fits ``check``, and one was written with
                another config (the first such error).
            CheckpointError: Checkpoints exist but none can be loaded (or passes ``check``).
        """
        errors: list[str] = []
        config_error: ConfigError | None = None
        for path in self.candidates():
            try:
                state = load_checkpoint(path, mmap=mmap)
            except CheckpointError as e:
                errors.append(str(e))
                continue
            try:
                if check is not None:
                    check(state)
            except CheckpointError as e:
                errors.append(f"checkpoint '{path}' is unusable: {e}")
                continue
            except ConfigError as e:
                config_error = config_error or e
                errors.append(f"checkpoint '{path}' does not fit this run: {_first_clause(e)}")
                continue
            if errors:
                warn_fallback(errors[0], path)
            return state
        if config_error is not None:
            raise config_error
        if errors:
            raise CheckpointError(
                f"no loadable checkpoint in '{self.directory}': " + " | ".join(errors)
            )
        return None

    def clear(self) -> None:
        """Delete ``last.pt``, ``prev.pt`` and ``best.pt`` (a fresh run in an existing run dir)."""
        self.last.unlink(missing_ok=True)
        self.prev.unlink(missing_ok=True)
        self.best.unlink(missing_ok=True)


def _first_clause(err: BaseException, limit: int = 300) -> str:
    """``err``'s message up to its advice (the first ". "), at most ``limit`` characters."""
    text = " ".join(str(err).split()).split(". ", 1)[0]
    return text if len(text) <= limit else text[:limit] + "..."


def warn_fallback(problem: str, path: Path) -> None:
    """Warn (``UserWarning``, one line) that ``problem`` made a resume fall back to ``path``.

    The problem's own advice to delete the file and fall back is left out: the fallback is done.
    """
    problem = problem.split("; delete it to fall back", 1)[0]
    warnings.warn(f"{problem}; resuming from the previous checkpoint '{path}'", stacklevel=3)


# --------------------------------------------------------------------------------------------
# RNG states


def capture_rng() -> dict[str, Any]:
    """The states of Python's ``random``, NumPy's global and torch's CPU (and CUDA) generators.

    Returns:
        A dict of tensors and primitives that survives ``torch.load(weights_only=True)``:
        ``{"python": {"version", "state" (int64 [625]), "gauss_next"}, "numpy": {"kind",
        "keys" (int64 [624]), "pos", "has_gauss", "cached_gaussian"}, "torch": uint8 tensor,
        "cuda": [uint8 tensor per device] (only when this process has initialised CUDA: a
        run on the CPU never creates a CUDA context, also where CUDA is available)}``.
    """
    version, py_state, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # noqa: NPY002 (global state)
    out: dict[str, Any] = {
        "python": {
            "version": int(version),
            "state": torch.tensor(py_state, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(state: Mapping[str, Any]) -> None:
    """Restore what :func:`capture_rng` returned.

    CUDA states are restored for the devices present in both the state and this machine, in a
    process that uses CUDA (one that has initialised it).

    Raises:
        CheckpointError: ``state`` lacks a generator or has malformed entries.
    """
    try:
        py = state["python"]
        random.setstate(
            (int(py["version"]), tuple(int(v) for v in py["state"].tolist()), py["gauss_next"])
        )
        npst = state["numpy"]
        np.random.set_state(  # noqa: NPY002 (restoring the global state)
            (
                str(npst["kind"]),
                npst["keys"].numpy().astype(np.uint32),
                int(npst["pos"]),
                int(npst["has_gauss"]),
                float(npst["cached_gaussian"]),
            )
        )
        torch.set_rng_state(state["torch"])
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as e:
        detail = " ".join(str(e).split())
        raise CheckpointError(
            f"RNG state in the checkpoint is malformed ({type(e).__name__}: {detail}); expected "
            f"the keys 'python', 'numpy', 'torch' as written by capture_rng()"
        ) from e
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
        n = min(len(cuda), torch.cuda.device_count())
        for i in range(n):
            torch.cuda.set_rng_state(cuda[i], device=i)


def detached_copy(obj: Any) -> Any:
    """``obj`` with every tensor cloned (detached) and containers copied (types kept).

    A copied mapping keeps its type and attributes (a module state dict's ``_metadata``).
    """
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        out = copy.copy(obj)
        for k, v in obj.items():
            out[k] = detached_copy(v)
        return out
    if isinstance(obj, list):
        return [detached_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(detached_copy(v) for v in obj)
    return obj
