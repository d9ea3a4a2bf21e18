"""A worker for the fault-tolerance test: rank 1 kills itself mid-epoch in the first attempt."""

import os
import signal

from fleetgnn.cli.train import run_worker


def crashing_worker(cfg_dict, run_dir, dataset, crash_at):
    """``run_worker`` whose rank 1 is SIGKILLed at ``crash_at = (epoch, step)`` on attempt 0."""
    from fleetgnn.engines.minibatch import MinibatchEngine

    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if first_attempt and os.environ.get("RANK") == "1":
        original = MinibatchEngine.train_step

        def train_step(self, epoch, step, batch, waited):
            if (epoch, step) == tuple(crash_at):
                with open(os.path.join(run_dir, "killed-rank-1"), "w") as f:
                    f.write(f"{epoch} {step}")
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self, epoch, step, batch, waited)

        MinibatchEngine.train_step = train_step
    return run_worker(cfg_dict, run_dir, dataset, False, False)
