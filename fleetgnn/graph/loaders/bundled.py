"""Small real datasets shipped inside the package (``fleetgnn/data``), for examples and tests.

=============  ===========================================  ====================================
name           files                                        origin (see ``fleetgnn/data/README.md``)
=============  ===========================================  ====================================
Planetoid      ``data/planetoid/ind.cora.*``                Yang, Cohen & Salakhutdinov 2016, MIT
gnn-benchmark  ``data/npz/cora.npz``                        Shchur et al. 2018, MIT
=============  ===========================================  ====================================

``fleetgnn prepare planetoid --name cora`` (no ``--root``) and ``fleetgnn prepare npz --name cora``
(no ``--file``) read these copies.
"""

from __future__ import annotations

from pathlib import Path

from fleetgnn.errors import DatasetError

#: the directory of the bundled files (package data: present in a wheel and in a clone alike)
DATA_DIR = Path(__file__).resolve().parents[2] / "data"
PLANETOID_NAMES: tuple[str, ...] = ("cora",)
NPZ_NAMES: tuple[str, ...] = ("cora",)


def _check_bundled(kind: str, name: str, names: tuple[str, ...], otherwise: str) -> None:
    if name.lower() not in names:
        raise DatasetError(
            f"{kind} '{name}' does not ship with fleetgnn (bundled: {', '.join(names)}); "
            f"{otherwise}"
        )


def planetoid_root(name: str = "cora") -> Path:
    """The directory holding the bundled ``ind.<name>.*`` files.

    Raises:
        DatasetError: ``name`` is not bundled (the message names the ones that are).
    """
    _check_bundled(
        "Planetoid", name, PLANETOID_NAMES, f"give --root DIR holding your ind.{name}.* files"
    )
    return DATA_DIR / "planetoid"


def npz_file(name: str = "cora") -> Path:
    """The bundled gnn-benchmark ``<name>.npz`` file.

    Raises:
        DatasetError: ``name`` is not bundled (the message names the ones that are).
    """
    _check_bundled("npz", name, NPZ_NAMES, "give --file PATH to your .npz file")
    return DATA_DIR / "npz" / f"{name.lower()}.npz"
