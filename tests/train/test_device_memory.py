"""A CUDA out-of-memory error becomes one line naming the rank, device, phase and a fix."""

import io

import pytest
import torch
from rich.console import Console

from fleetgnn.errors import DeviceMemoryError, FleetgnnError
from fleetgnn.train import Trainer, load_config
from fleetgnn.train.oom import DEVICE_MEMORY_FIXES, Phase, describe_oom, device_memory_guard

from .test_trainer import LogRegEngine

TORCH_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 79.19 GiB "
    "of which 1.02 GiB is free. Of the allocated memory 75.01 GiB is allocated by PyTorch, and "
    "2.13 GiB is reserved but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


class OomAt(LogRegEngine):
    """Runs out of device memory before step ``at[1]`` of epoch ``at[0]``."""

    def __init__(self, at, **kw):
        super().__init__(**kw)
        self.at = at

    def run_epoch(self, epoch, start_step=0, on_step=None):
        def guarded(step, stats):
            if on_step is not None:
                on_step(step, stats)
            if (epoch, step + 1) == self.at:
                raise torch.cuda.OutOfMemoryError(TORCH_MESSAGE)

        return super().run_epoch(epoch, start_step, guarded)


def test_training_oom_names_rank_device_phase_and_fix(tmp_path):
    cfg = load_config(overrides=["train.epochs=3", "train.checkpoint_every=0"])
    engine = OomAt((1, 2))
    with pytest.raises(DeviceMemoryError) as e:
        with device_memory_guard("minibatch", 3, "cuda:0") as phase:
            trainer = Trainer.from_config(
                engine, cfg, tmp_path, console=Console(file=io.StringIO()), show_progress=False
            )
            phase.trainer = trainer
            trainer.fit()
    line = str(e.value)
    assert isinstance(e.value, FleetgnnError) and "\n" not in line
    assert line.startswith("rank 3 ran out of device memory on cuda:0 during training (epoch 1")
    assert "step 2" in line and "(tried to allocate 2.50 GiB)" in line
    assert DEVICE_MEMORY_FIXES["minibatch"] in line and "fleetgnn plan" in line
    assert "PYTORCH_CUDA_ALLOC_CONF" not in line  # the allocator's paragraph stays out


def test_setup_and_evaluation_phases():
    line = describe_oom(RuntimeError("no size given"), "fullgraph", 0, "cuda:1", Phase())
    assert "during setup (building the engine) with the fullgraph engine" in line
    assert "tried to allocate" not in line and "--nproc" in line

    class Evaluating:
        phase = "evaluation after epoch 4"

    phase = Phase()
    phase.trainer = Evaluating()
    assert "during evaluation after epoch 4" in describe_oom(RuntimeError(), "offload", 1, 0, phase)


def test_other_errors_pass_through():
    with pytest.raises(ValueError, match="not memory"):
        with device_memory_guard("reference", 0, "cpu"):
            raise ValueError("not memory")


def test_the_fixes_name_real_config_keys():
    """Every ``section.key`` the advice names is a key a user can set."""
    import re

    from fleetgnn.config.run import config_keys

    keys = {k.key for k in config_keys()}
    named = {
        m for fix in DEVICE_MEMORY_FIXES.values() for m in re.findall(r"\b[a-z]+\.[a-z_]+", fix)
    }
    assert named and named <= keys, named - keys
