"""Fixtures every test directory shares: the ``device`` parameter.

A test that takes ``device`` runs on ``"cpu"`` always and on ``"cuda"`` where CUDA is available;
the CUDA case is marked ``gpu`` (``pytest -m gpu`` selects it on a GPU machine) and skipped
cleanly elsewhere.
"""

import warnings

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


@pytest.fixture(autouse=True)
def _no_default_process_group_left():
    """Destroy torch.distributed's default group a test left behind, with a warning naming it.

    A leaked group makes every later in-process test that starts its own fail far from the
    cause; ``context_or_own(None)`` makes and destroys one for an in-process engine.
    """
    yield
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        warnings.warn(
            "this test left torch.distributed's default process group initialised; build "
            "in-process engines inside fleetgnn.distributed.testing.context_or_own(None)",
            stacklevel=1,
        )
