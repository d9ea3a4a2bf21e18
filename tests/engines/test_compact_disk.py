"""A dataset written compact (``prepare --feature-dtype``) trains as the float32 dataset with
``store.feature_dtype`` set to the same codec: the store holds the file's rows as stored, in
every tier, and every engine reads the same values.
"""

import json

import numpy as np
import pytest
import torch

from fleetgnn.cli.main import main
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.graph.compact import FeatureCodec
from fleetgnn.graph.dataset import open_dataset, write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.store import TierBudgets, UnifiedStore
from fleetgnn.train import engine_from_config, load_config

DTYPES = ("bfloat16", "float16", "float8_e4m3")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("compact")
    g = generate_graph(spec_for("tiny", 0.3), seed=4)
    out = {None: write_dataset(g, root / "plain")}
    for d in DTYPES:
        out[d] = write_dataset(g, root / d, feature_dtype=d)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_store_holds_the_rows_as_stored(datasets, dtype, monkeypatch):
    plain, comp = open_dataset(datasets[None]), open_dataset(datasets[dtype])
    rb = comp.x.stored_row_bytes
    budgets = TierBudgets(device=40 * rb, host=60 * rb)  # rows from device, host and disk
    first = "features_first"
    a = UnifiedStore.build(plain, budgets=budgets, order=first, feature_dtype=dtype)
    with monkeypatch.context() as m:  # the file's rows go into the tiers, never encoded again
        m.setattr(FeatureCodec, "encode", lambda *a: pytest.fail("compact rows re-encoded"))
        b = UnifiedStore.build(comp, budgets=budgets, order=first)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, plain.num_nodes, 400))
    assert a.gather(ids).numpy().tobytes() == b.gather(ids).numpy().tobytes()
    assert a.memory() == b.memory() and a.row_bytes() == b.row_bytes() == rb
    # the tiers hold the file's bytes (no decode/re-encode), the disk tier counts stored rows
    host = b.plan.features.host_rows()
    held = b._feat_host.contiguous().view(torch.uint8).numpy().tobytes()
    assert held == np.asarray(comp.x.stored[host]).tobytes()
    assert b.traffic["disk"]["bytes"] == rb * int(b.requests()["disk"])


def _config(dtype):
    return load_config(
        None,
        [
            "train.engine=minibatch",
            "train.dtype=float64",
            "train.batch_size=24",
            "train.fanouts=[4,3]",
            "model.name=sage",
            "model.hidden=8",
            "optim.optimizer=sgd",
            "optim.lr=0.5",
            "train.seed=7",
            "train.device=cpu",
            "store.device_budget=300B",
            "store.host_budget=600B",
            f"store.feature_dtype={'null' if dtype is None else dtype}",
        ],
    )


def _train(cfg, graph, ctx=None, engine=None):
    with engine_from_config(cfg, graph, ctx, engine=engine) as eng:
        losses = [s.loss_sum for epoch in range(2) for s in eng.run_epoch(epoch)]
        params = {n: p.detach().clone() for n, p in eng.module.named_parameters()}
        return losses, params, getattr(eng, "store", None) and eng.store.requests()


def _ranks(comm, paths):
    ctx = context_of(comm)
    out = {}
    for d in DTYPES:
        out[d, "float32"] = _train(_config(d), open_dataset(paths[None]), ctx)
        out[d, "compact"] = _train(_config(None), open_dataset(paths[d]), ctx)
    return out


@pytest.mark.slow
def test_minibatch_and_reference_match_the_converted_dataset(datasets):
    paths = {k: str(v) for k, v in datasets.items()}
    results = run_world(_ranks, 2, paths, timeout_s=600)
    for d in DTYPES:
        for res in results:
            want, got = res[d, "float32"], res[d, "compact"]
            assert got[0] == want[0], d  # losses, bit for bit
            for name, value in want[1].items():
                assert torch.equal(got[1][name], value), (d, name)
            assert all(got[2][k] > 0 for k in ("local", "host", "disk")), got[2]
        ref = _train(_config(d), open_dataset(datasets[None]), engine="reference")
        comp = _train(_config(None), open_dataset(datasets[d]), engine="reference")
        assert comp[0] == ref[0]
        for name, value in ref[1].items():
            assert torch.equal(comp[1][name], value), (d, name)


@pytest.mark.slow
def test_cli_trains_cora_prepared_bf16_like_float32_with_bf16(tmp_path):
    """Cora's 0/1 features are exact in bf16: both runs reach the same test accuracy."""
    assert main(["prepare", "planetoid", "--name", "cora", "--out", str(tmp_path / "c")]) == 0
    argv = ["prepare", "planetoid", "--name", "cora", "--feature-dtype", "bf16"]
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    acc = {}
    for name, extra in (("c", ["store.feature_dtype=bf16"]), ("b", [])):
        run = tmp_path / f"run-{name}"
        sets = ["train.engine=minibatch", "train.epochs=3", "store.device_budget=200KB"]
        cmd = ["train", "--dataset", str(tmp_path / name), "--no-progress", "--run-dir", str(run)]
        for s in [*sets, *extra]:
            cmd += ["--set", s]
        assert main(cmd) == 0
        acc[name] = json.loads((run / "summary.json").read_text())
    assert acc["b"]["test_acc"] == acc["c"]["test_acc"]
