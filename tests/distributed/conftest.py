"""Fixtures of the distributed tests."""

import pytest
import torch.distributed as dist

#: What a launcher (torchrun, fleetgnn's) sets for every worker.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def no_launcher(monkeypatch):
    """A plain process: no launcher variables, no process group yet."""
    for k in LAUNCH_VARS:
        monkeypatch.delenv(k, raising=False)
    assert not dist.is_initialized()
