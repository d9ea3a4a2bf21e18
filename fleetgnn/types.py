"""Type aliases and the closing mixin shared across fleetgnn.

Feature flags live in their configs, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike
from typing import TypeVar, Union

import numpy as np
import numpy.typing as npt

PathLikeStr = Union[str, "PathLike[str]"]
IndexArray = npt.NDArray[np.integer]
FloatArray = npt.NDArray[np.floating]
BoolArray = npt.NDArray[np.bool_]
#: A vectorised owner function: int64 array of global node IDs -> int64 array of their ranks.
OwnerFn = Callable[[np.ndarray], np.ndarray]
#: Who owns each global node ID: an int array ``owner[id] -> rank`` or an :data:`OwnerFn`
#: (e.g. ``PartitionBook.owner``).
OwnerLike = IndexArray | OwnerFn

_C = TypeVar("_C", bound="Closing")


class Closing:
    """A resource released by ``close()`` that is its own context manager: ``with r:`` closes it.

    Subclasses define :meth:`close`; ``__enter__`` returns the resource itself.
    """

    def close(self) -> None:
        """Release what the resource holds."""
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
