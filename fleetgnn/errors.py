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
