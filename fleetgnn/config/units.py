"""Byte counts in configs: ``"64MB"``, ``"1.5GiB"``, ``"0"`` or a plain number of bytes.

Lives in the config layer so that a run config's budgets (``store.device_budget``,
``store.host_budget``) are checked when the config is loaded, naming the key, before any data is
read or any worker starts; :mod:`fleetgnn.store` re-exports :func:`parse_bytes`.
"""

from __future__ import annotations

import math
import re

import numpy as np

from fleetgnn.errors import ConfigError

#: Unit suffix (lower case) -> bytes.
UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}
#: The largest byte count accepted (1 EiB): more than any machine holds, and far below the
#: int64 counters (2**63) the stores and cost models compute with.
MAX_BYTES = 2**60
_BYTES_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: str | int | float, name: str = "budget") -> int:
    """Parse a byte count such as ``"64MB"``, ``"1.5GiB"``, ``"0"`` or ``4096``.

    ``KB/MB/GB/TB`` are powers of 1000, ``KiB/MiB/GiB/TiB`` (and the bare ``K/M/G/T``) powers of
    1024; case is ignored. Fractions are rounded down to whole bytes.

    Args:
        value: The string or number.
        name: Argument or config key named in error messages (e.g. ``"store.device_budget"``).

    Returns:
        The number of bytes, ``>= 0``.

    Raises:
        ConfigError: If the value is negative, not finite, more than :data:`MAX_BYTES` or not
            understood.
    """
    if isinstance(value, bool):
        raise ConfigError(f"'{name}' must be a byte count like '64MB' (got {value!r})")
    if isinstance(value, (int, np.integer, float, np.floating)):
        number, unit = float(value), ""
    elif isinstance(value, str):
        m = _BYTES_RE.match(value)
        if m is None or m.group(2).lower() not in UNITS:
            raise ConfigError(
                f"'{name}' must be a byte count like '64MB', '1.5GiB' or '0' (got {value!r}); "
                f"units: B, KB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024)"
            )
        number, unit = float(m.group(1)), m.group(2).lower()
    else:
        raise ConfigError(
            f"'{name}' must be a byte count like '64MB' (got {type(value).__name__} {value!r})"
        )
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"'{name}' must be a finite byte count >= 0 (got {value!r})")
    count = int(number * UNITS[unit])
    if count > MAX_BYTES:
        raise ConfigError(
            f"'{name}' is {value!r}, more bytes than any machine holds (at most 2**60, 1 EiB); "
            f"give the memory to use, e.g. '16GB'"
        )
    return count


#: A budget of ``None`` ("no limit") as a byte count: above every budget :func:`parse_bytes`
#: accepts, and below the int64 counters it is added to.
UNLIMITED = 1 << 62


def budget_bytes(value: str | int | float | None, name: str = "budget") -> int:
    """A budget's byte count: :func:`parse_bytes` of ``value``, :data:`UNLIMITED` for ``None``."""
    return UNLIMITED if value is None else parse_bytes(value, name)
