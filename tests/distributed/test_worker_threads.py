"""Every worker of a distributed run sets its intra-op threads (train.threads) before training:
the explicit value, or by default the usable cores divided by the processes on this host."""

import pytest
import torch
import yaml

from fleetgnn.cli.train import run_worker
from fleetgnn.distributed import launch
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import load_config, usable_cores


def _threads_worker(cfg_dict, run_dir, dataset):
    run_worker(cfg_dict, run_dir, dataset, False, False, True)
    return torch.get_num_threads()


@pytest.mark.slow
@pytest.mark.parametrize("threads", [None, 3])
def test_every_worker_sets_its_threads(tmp_path, monkeypatch, threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the workers inherit the environment
    data = write_dataset(generate_graph(spec_for("tiny", 0.3), seed=2), tmp_path / "data")
    items = ["train.engine=minibatch", "train.nproc=2", "train.epochs=1", "train.batch_size=32"]
    if threads is not None:
        items.append(f"train.threads={threads}")
    cfg = load_config(None, items).to_dict()
    out = launch(_threads_worker, args=(cfg, str(tmp_path / "run"), str(data)), nproc=2)
    # torch's own default would be every core in each process
    expected = threads if threads is not None else max(1, usable_cores() // 2)
    assert out == {0: expected, 1: expected}
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert recorded["train"]["threads"] == expected
