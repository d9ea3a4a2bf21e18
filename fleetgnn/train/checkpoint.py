"""Checkpoints: atomic saves, safe loads, RNG capture, and a two-file retention scheme.

A checkpoint is a ``dict`` holding only tensors, numbers, strings, ``None``, lists, tuples and
dicts, so it loads with ``torch.load(weights_only=True)`` (no arbitrary unpickling). RNG states are
converted to that form by :func:`capture_rng`.

Retention (:class:`CheckpointDir`)::

    RUN_DIR/checkpoints/last.pt   the newest complete checkpoint
    RUN_DIR/checkpoints/prev.pt   the one before it
    RUN_DIR/checkpoints/best.pt   the end of the best-validation epoch (the one the summary reports)

A save writes ``.last.pt.<random>.tmp`` in the same directory (flushed and fsynced), then renames
``last.pt`` to ``prev.pt`` and the temporary file to ``last.pt`` (both ``os.replace``, atomic on
POSIX). A crash at any point leaves at least one complete checkpoint: before the first rename both
old files are intact; between the renames ``prev.pt`` holds the previous ``last.pt``. Loading tries
``last.pt`` first and falls back to ``prev.pt`` when ``last.pt`` is missing or unreadable.

A save with ``best=True`` first makes the same file ``best.pt`` (a hard link to the temporary file
renamed over ``best.pt``, or a second atomic write where links are not supported), so ``best.pt``
is never older than the ``last.pt`` that records its epoch as the best: a crash in between leaves
an older ``last.pt``, and the resumed run writes ``best.pt`` again when it reaches that epoch.
"""

from __future__ import annotations

import os
import random
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetgnn.errors import FleetgnnError
from fleetgnn.graph.dataset import fsync_dir
from fleetgnn.types import PathLikeStr


class CheckpointError(FleetgnnError):
    """A checkpoint file is missing, truncated, corrupt or has unexpected contents."""


def _temp_sibling(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def _write_temp_checkpoint(path: Path, state: Mapping[str, Any]) -> Path:
    tmp = _temp_sibling(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(dict(state), f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def save_checkpoint(path: PathLikeStr, state: Mapping[str, Any]) -> Path:
    """Save ``state`` to ``path`` atomically: a reader sees the old file or the new one, whole.

    The state is written to a temporary file in the same directory, flushed and fsynced, and
    renamed over ``path`` with ``os.replace``. On any failure the temporary file is removed and
    ``path`` is untouched.

    Args:
        path: Target file (parent directories are created).
        state: Tensors, numbers, strings, ``None``, and lists/tuples/dicts of them.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    p = Path(path)
    tmp = _write_temp_checkpoint(p, state)
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
    try:
        state = torch.load(p, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # torch raises RuntimeError, EOFError, UnpicklingError, ...
        raise CheckpointError(
            f"checkpoint '{p}' ({p.stat().st_size} bytes) is truncated or corrupt and cannot be "
            f"loaded ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); delete it "
            f"to fall back to the previous checkpoint, or start a fresh run"
        ) from e
    if not isinstance(state, dict):
        raise CheckpointError(
            f"checkpoint '{p}' holds a {type(state).__name__}, expected a dict; it was not "
            f"written by fleetgnn"
        )
    return state


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

    def save(self, state: Mapping[str, Any], *, best: bool = False) -> Path:
        """Save ``state`` as ``last.pt``, keeping the former ``last.pt`` as ``prev.pt``.

        Args:
            state: The checkpoint (see :func:`save_checkpoint`).
            best: Also make it ``best.pt`` (atomically, before ``last.pt``; see the module
                docstring).

        Returns:
            The path of ``last.pt``.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = _write_temp_checkpoint(self.last, state)
        try:
            if best:
                self._replace_best(tmp, state)
            if self.last.exists():
                os.replace(self.last, self.prev)
            os.replace(tmp, self.last)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self.directory)
        return self.last

    def _replace_best(self, written: Path, state: Mapping[str, Any]) -> None:
        """Make ``best.pt`` the complete file ``written`` (a hard link renamed into place)."""
        link = _temp_sibling(self.best)
        link.unlink()
        try:
            os.link(written, link)
        except OSError:  # no hard links here (some network or FUSE file systems): write a copy
            link = _write_temp_checkpoint(self.best, state)
        try:
            os.replace(link, self.best)
        except BaseException:
            link.unlink(missing_ok=True)
            raise

    def load_latest(self, *, mmap: bool = False) -> dict[str, Any] | None:
        """The newest loadable checkpoint, or ``None`` when there is none.

        Falls back to ``prev.pt`` (with a warning) when ``last.pt`` is missing or unreadable.

        Args:
            mmap: Map tensor storage from the file (see :func:`load_checkpoint`).

        Raises:
            CheckpointError: Checkpoints exist but none can be loaded.
        """
        errors: list[str] = []
        for path in (self.last, self.prev):
            if not path.exists():
                continue
            try:
                state = load_checkpoint(path, mmap=mmap)
            except CheckpointError as e:
                errors.append(str(e))
                continue
            if errors:
                warnings.warn(
                    f"{errors[0]}; resuming from the previous checkpoint '{path}'", stacklevel=2
                )
            return state
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


# --------------------------------------------------------------------------------------------
# RNG states


def capture_rng() -> dict[str, Any]:
    """The states of Python's ``random``, NumPy's global and torch's CPU (and CUDA) generators.

    Returns:
        A dict of tensors and primitives that survives ``torch.load(weights_only=True)``:
        ``{"python": {"version", "state" (int64 [625]), "gauss_next"}, "numpy": {"kind",
        "keys" (int64 [624]), "pos", "has_gauss", "cached_gaussian"}, "torch": uint8 tensor,
        "cuda": [uint8 tensor per device] (only when CUDA is available)}``.
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
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(state: Mapping[str, Any]) -> None:
    """Restore what :func:`capture_rng` returned.

    CUDA states are restored for the devices present in both the state and this machine.

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
        raise CheckpointError(
            f"RNG state in the checkpoint is malformed ({type(e).__name__}: {e}); expected the "
            f"keys 'python', 'numpy', 'torch' as written by capture_rng()"
        ) from e
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        n = min(len(cuda), torch.cuda.device_count())
        for i in range(n):
            torch.cuda.set_rng_state(cuda[i], device=i)
