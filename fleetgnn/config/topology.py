"""Device topologies (``store.topology``): named ones, explicit matrices and matrix files.

:func:`topology_matrix` turns a ``store.topology`` value into a validated ``N x N`` bandwidth
matrix. It lives in the config layer, torch-free, so ``fleetgnn train`` reads and checks a
topology file (through the bounded reader of :mod:`fleetgnn.config.textfile`) before it imports
torch; :mod:`fleetgnn.store.placement` solves placements from the matrix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fleetgnn.config.textfile import MAX_YAML_BYTES, load_json_file, load_yaml_file, parse_yaml
from fleetgnn.errors import ConfigError

__all__ = [
    "DGX1_V100_LINKS",
    "TOPOLOGIES",
    "TopologySpec",
    "check_bandwidth",
    "check_world",
    "topology_matrix",
]


#: Named device topologies accepted by :func:`topology_matrix` (``store.topology``).
TOPOLOGIES: tuple[str, ...] = ("uniform", "dgx1-v100")

#: 8x V100 DGX-1 hybrid cube-mesh NVLink (XGNN Sec. 6, its golden placement test): GB/s per
#: direction per pair (one NVLink 2 link = 25 GB/s, a doubled link = 50); pairs not listed have no
#: NVLink. The one copy: the ``dgx1-v100`` hardware profile of the cost model reads it too.
DGX1_V100_LINKS = (
    "0-1:25 0-2:25 0-3:50 0-6:50 1-2:50 1-3:25 1-7:50 2-3:50 2-4:25 3-5:25 4-5:50 4-6:25 "
    "4-7:50 5-6:50 5-7:25 6-7:25"
)
_LOCAL_BANDWIDTH = 700.0  # GB/s, a device reading its own memory (V100 HBM2, rounded)
_UNIFORM_LINK = 50.0  # GB/s, every pair linked (NVSwitch-like)
_TOPOLOGY_FILES = (".json", ".yaml", ".yml")

TopologySpec = str | os.PathLike | Sequence[Sequence[float]] | np.ndarray | None


def _dgx1_v100() -> np.ndarray:
    b = np.zeros((8, 8))
    np.fill_diagonal(b, _LOCAL_BANDWIDTH)
    for link in DGX1_V100_LINKS.split():
        ij, w = link.split(":")
        i, j = (int(v) for v in ij.split("-"))
        b[i, j] = b[j, i] = float(w)
    return b


def _choices(key: str) -> str:
    named = ", ".join(repr(t) for t in TOPOLOGIES)
    return (
        f"valid values for '{key}': {named}, an N x N bandwidth matrix (list of lists, N = world "
        f"size, diagonal = local bandwidth, 0 = no link) or a path to a "
        f"{'/'.join(_TOPOLOGY_FILES)} file holding one"
    )


def _load_matrix_file(path: Path, key: str) -> object:
    """The matrix in a JSON/YAML file: a list of lists, or a mapping with key ``bandwidth``."""
    if path.suffix.lower() not in _TOPOLOGY_FILES:
        raise ConfigError(
            f"'{key}' file {str(path)!r} must end in {', '.join(_TOPOLOGY_FILES)}; " + _choices(key)
        )
    what = f"'{key}' file"
    if path.suffix.lower() == ".json":
        data = load_json_file(path, what, max_bytes=MAX_YAML_BYTES, fix=_choices(key))
    else:
        data = load_yaml_file(path, what, fix=_choices(key))
    if isinstance(data, dict):
        if set(data) != {"bandwidth"}:
            raise ConfigError(
                f"'{key}' file {str(path)!r} must hold a bandwidth matrix (a list of lists) or a "
                f"mapping with the single key 'bandwidth' (got keys {sorted(map(str, data))})"
            )
        data = data["bandwidth"]
    if not isinstance(data, list):
        raise ConfigError(
            f"'{key}' file {str(path)!r} must hold a bandwidth matrix, a list of lists "
            f"(got {type(data).__name__})"
        )
    return data


def topology_matrix(
    spec: TopologySpec, world_size: int, *, key: str = "store.topology"
) -> np.ndarray:
    """The ``N x N`` device bandwidth matrix of a named or explicit topology (``store.topology``).

    ==================  =====================================================================
    ``spec``            matrix
    ==================  =====================================================================
    ``None``,           fully connected: local bandwidth 700 on the diagonal, 50 on every
    ``"uniform"``       link; the placement is one partition per device (the modulo split)
    ``"dgx1-v100"``     the 8x V100 DGX-1 hybrid cube-mesh (NVLink 25/50 GB/s, local 700); the
                        first ``world_size`` GPUs of it when ``world_size < 8`` (GPUs 0-3 form
                        a fully linked quad, so 2-4 ranks need no replicas; 5-7 ranks do)
    list of lists,      an explicit matrix: ``bandwidth[i][i] > 0`` the local bandwidth,
    ``np.ndarray``      ``0`` no link, links symmetric (values may differ per direction)
    ``"[[...]]"``       the same matrix written inline (JSON/YAML flow syntax, e.g. from
                        ``--set store.topology=[[700,50],[50,700]]``)
    a path              a ``.json`` / ``.yaml`` / ``.yml`` file holding the matrix, or a
                        mapping ``{bandwidth: [[...], ...]}``
    ==================  =====================================================================

    Only which pairs are linked and the ratios between bandwidths matter to the solver; the
    named matrices are in GB/s.

    Args:
        spec: The topology, as above (names are case-insensitive).
        world_size: Number of device ranks ``N`` (the matrix must be ``N x N``).
        key: The configuration key named in error messages.

    Returns:
        float64 ``[N, N]``, validated (square, finite, >= 0, positive diagonal, symmetric links).

    Raises:
        ConfigError: Naming ``key``, the bad value and the valid choices: an unknown name, an
            unreadable or malformed file, a matrix that is not ``N x N`` for ``N = world_size``,
            negative entries, no local bandwidth, asymmetric links, or ``"dgx1-v100"`` with more
            than 8 ranks.
    """
    world_size, _ = check_world(world_size, None)
    matrix: object
    if spec is None:
        spec = "uniform"
    if isinstance(spec, os.PathLike):
        matrix = _load_matrix_file(Path(spec), key)
    elif isinstance(spec, str):
        name = spec.strip().lower()
        if name == "uniform":
            b = np.full((world_size, world_size), _UNIFORM_LINK)
            np.fill_diagonal(b, _LOCAL_BANDWIDTH)
            return b
        if name == "dgx1-v100":
            if world_size > 8:
                raise ConfigError(
                    f"'{key}' = 'dgx1-v100' has 8 GPUs but the world has {world_size} ranks; "
                    "use at most 8 ranks, or give an explicit bandwidth matrix"
                )
            return _dgx1_v100()[:world_size, :world_size].copy()
        if name.startswith("["):  # YAML flow syntax is a superset of JSON arrays
            matrix = parse_yaml(spec, f"'{key}' = {_short(spec)}", fix=_choices(key))
        elif name.endswith(_TOPOLOGY_FILES) or os.sep in spec:
            matrix = _load_matrix_file(Path(spec), key)
        else:
            raise ConfigError(f"'{key}' = {spec!r} is not a known topology; " + _choices(key))
    elif isinstance(spec, (list, tuple, np.ndarray)):
        matrix = spec
    else:
        raise ConfigError(
            f"'{key}' must be a topology name, a matrix or a file path (got "
            f"{type(spec).__name__} {_short(spec)}); " + _choices(key)
        )
    b = np.asarray(check_bandwidth(matrix, key), dtype=np.float64)
    if b.shape[0] != world_size:
        raise ConfigError(
            f"'{key}' is a {b.shape[0]} x {b.shape[0]} bandwidth matrix but the world has "
            f"{world_size} ranks; give one row and one column per rank"
        )
    return b


def check_world(world_size: object, ranks_per_host: object | None) -> tuple[int, int]:
    """``(world_size, ranks_per_host)`` as ints, checked (``None`` ranks per host: all).

    Raises:
        ConfigError: Not ints, ``world_size < 1`` or ``ranks_per_host`` outside
            ``[1, world_size]``.
    """
    if (
        isinstance(world_size, bool)
        or not isinstance(world_size, (int, np.integer))
        or (world_size < 1)
    ):
        raise ConfigError(f"'world_size' must be an int >= 1 (got {world_size!r})")
    rph = world_size if ranks_per_host is None else ranks_per_host
    if (
        isinstance(rph, bool)
        or not isinstance(rph, (int, np.integer))
        or not (1 <= rph <= world_size)
    ):
        raise ConfigError(
            f"'ranks_per_host' must be an int in [1, world_size={world_size}] (got {rph!r})"
        )
    return int(world_size), int(rph)


def check_bandwidth(bandwidth: object, name: str = "bandwidth") -> list[list[float]]:
    """Validate an ``N x N`` bandwidth matrix; errors name it ``name``."""
    try:
        b = np.asarray(bandwidth, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"'{name}' must be a square numeric matrix (got {_short(bandwidth)}: {exc})"
        ) from None
    if b.ndim != 2 or b.shape[0] != b.shape[1] or b.shape[0] == 0:
        raise ConfigError(
            f"'{name}' must be a square N x N matrix with N >= 1 (got shape {b.shape})"
        )
    if not np.isfinite(b).all() or (b < 0).any():
        raise ConfigError(f"'{name}' entries must be finite and >= 0 (0 = no link)")
    if (np.diag(b) <= 0).any():
        i = int(np.flatnonzero(np.diag(b) <= 0)[0])
        raise ConfigError(
            f"'{name}[{i}][{i}]' must be the device's local bandwidth > 0 (got {b[i, i]})"
        )
    if ((b > 0) != (b.T > 0)).any():
        i, j = (int(v) for v in np.argwhere((b > 0) != (b.T > 0))[0])
        raise ConfigError(
            f"'{name}': links must be symmetric: {name}[{i}][{j}]={b[i, j]} but "
            f"{name}[{j}][{i}]={b[j, i]}; use 0 on both sides for no link"
        )
    if b.shape[0] > 16:
        raise ConfigError(
            f"'{name}': the placement solver supports up to 16 devices (got {b.shape[0]})"
        )
    return b.tolist()


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
