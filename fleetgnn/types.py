"""Type aliases shared across fleetgnn (feature flags live in their configs, not here)."""

from __future__ import annotations

from os import PathLike
from typing import Union

import numpy as np
import numpy.typing as npt

PathLikeStr = Union[str, "PathLike[str]"]
IndexArray = npt.NDArray[np.integer]
FloatArray = npt.NDArray[np.floating]
BoolArray = npt.NDArray[np.bool_]
