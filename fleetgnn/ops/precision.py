"""Mixed precision in the graph ops: inputs widened to float32, reductions in float32.

Under ``torch.autocast`` in bfloat16 a layer's matrix products hand the graph ops bfloat16 rows.
Sums over thousands of in-edges lose most of bfloat16's 8 significant bits, and torch's sparse
kernels do not take bfloat16 on every device, so every op here widens its low-precision inputs
to float32 and runs with autocast off (:func:`float32_inputs`, :func:`full_precision`): the
output is float32 and the next matrix product casts it down again. Gradients flow back through
the widening cast, so an input's gradient has the input's dtype.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor

#: Float dtypes the ops widen to float32.
LOW_PRECISION: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16)


def float32_inputs(*tensors: Tensor | None) -> tuple[Any, ...]:
    """``tensors`` with every bfloat16/float16 one cast to float32 (others, ``None``, as given)."""
    return tuple(t.float() if t is not None and t.dtype in LOW_PRECISION else t for t in tensors)


def full_precision(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Autocast switched off on ``device``'s type where it is on (else a no-op)."""
    if torch.is_autocast_enabled(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()
