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

    The message is one line: ``no space left on DEVICE: writing 'PATH' (N bytes) failed; M bytes
    free; FIX``. When ``M`` is measured again after the partial files were removed it can exceed
    ``N`` (the space went to the files written before it, other programs, reserved blocks or a
    quota); the message then says so instead of seeming to contradict itself.

    Args:
        device: The file system, as shown in the message (its mount point and source).
        need: Bytes the failed write needed.
        free: Bytes free on the file system.
        fix: What to do about it, appended to the message.
        path: The file or directory being written (to measure ``free`` again later).
        remeasured: ``free`` was measured after the partial files were removed.
        checked: No write failed: a check before writing found too little space (the message
            says ``'PATH' needs N bytes``).
    """

    def __init__(
        self,
        device: str,
        need: int,
        free: int,
        fix: str = "",
        path: str = "",
        remeasured: bool = False,
        checked: bool = False,
    ) -> None:
        self.device, self.need, self.free, self.fix, self.path = device, need, free, fix, path
        self.remeasured, self.checked = remeasured, checked
        super().__init__(self._message())

    def _message(self) -> str:
        what = f"writing '{self.path}'" if self.path else "a write"
        what = f"{what} ({self.need} bytes) failed"
        if self.checked:
            what = f"'{self.path}' needs {self.need} bytes" if self.path else f"needs {self.need}"
        free = f"{self.free} bytes free"
        if self.remeasured:
            free += " now that the partial files are removed"
        if self.free >= self.need and not self.checked:
            free += (
                " (enough for this write alone: the files written before it, other programs, "
                "reserved blocks or a quota took the space while it ran)"
            )
        tail = f"; {self.fix}" if self.fix else ""
        return f"no space left on {self.device}: {what}; {free}{tail}"

    def __reduce__(self) -> tuple:
        args = (self.device, self.need, self.free, self.fix, self.path, self.remeasured)
        args += (self.checked,)
        return (type(self), args)

    def update_free(self, free: int) -> None:
        """Set the free bytes shown, measured again once partial files are removed."""
        self.free = int(free)
        self.remeasured = True
        self.args = (self._message(),)
