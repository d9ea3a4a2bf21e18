"""User-facing errors.

Every problem caused by the user's input (a malformed file, a bad argument, an inconsistent
dataset directory) raises a subclass of :class:`FleetgnnError`, which is itself a
:class:`ValueError`. The CLI prints such errors as one line and exits with status 2; anything else
is a bug and shows a traceback.
Messages name the argument or array, show the bad value, give the valid range and suggest a fix.
"""

from __future__ import annotations


class FleetgnnError(ValueError):
    """Base class of every error fleetgnn raises for bad user input."""


class GraphError(FleetgnnError):
    """A graph's arrays are inconsistent (bad IDs, shapes, labels, masks or values)."""


class DatasetError(FleetgnnError):
    """A dataset directory or an input file cannot be read or is inconsistent."""


class PartitionError(FleetgnnError):
    """A partitioning request or a saved partition book is invalid."""


class ConfigError(FleetgnnError):
    """A configuration key or value is invalid."""


class DeviceMemoryError(FleetgnnError):
    """A CUDA device ran out of memory: one line naming the rank, device, phase and a fix."""


class NonFiniteLossError(FleetgnnError):
    """A training step's loss is NaN or infinite (bad values in the data, or a diverging run)."""


class DiskFullError(FleetgnnError):
    """A write failed because the file system (or the user's quota) is full.

    The message is one line, ``no space left on DEVICE: needs N bytes, M free; FIX``.

    Args:
        device: The file system, as shown in the message (its mount point and source).
        need: Bytes the failed write needed.
        free: Bytes free on the file system.
        fix: What to do about it, appended to the message.
        path: The file or directory being written (to measure ``free`` again later).
    """

    def __init__(self, device: str, need: int, free: int, fix: str = "", path: str = "") -> None:
        self.device, self.need, self.free, self.fix, self.path = device, need, free, fix, path
        super().__init__(self._message())

    def _message(self) -> str:
        tail = f"; {self.fix}" if self.fix else ""
        return f"no space left on {self.device}: needs {self.need} bytes, {self.free} free{tail}"

    def __reduce__(self) -> tuple:
        return (type(self), (self.device, self.need, self.free, self.fix, self.path))

    def update_free(self, free: int) -> None:
        """Set the free bytes shown (e.g. measured again once partial files are removed)."""
        self.free = int(free)
        self.args = (self._message(),)
