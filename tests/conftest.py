"""Fixtures every test directory shares: the ``device`` parameter.

A test that takes ``device`` runs on ``"cpu"`` always and on ``"cuda"`` where CUDA is available;
the CUDA case is marked ``gpu`` (``pytest -m gpu`` selects it on a GPU machine) and skipped
cleanly elsewhere.
"""

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

#: The devices a device-parametrized test runs on (use as ``@pytest.mark.parametrize`` values).
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")],
        id="cuda",
    ),
]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """``"cpu"``, then ``"cuda"`` (marked ``gpu``; skipped without CUDA)."""
    return request.param
