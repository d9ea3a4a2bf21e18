"""A typed dataset written compact (``prepare --feature-dtype`` on a typed source) trains as the
float32 typed dataset with ``store.feature_dtype`` set to the same codec, on the reference,
minibatch (keyed store over device, host and disk) and split engines, bit for bit in float64.
"""

import dataclasses
import json

import numpy as np
import pytest
import torch

from fleetgnn.cli.main import main
from fleetgnn.distributed.testing import context_of, run_world
from fleetgnn.errors import GraphError
from fleetgnn.graph.compact import feature_codec
from fleetgnn.graph.dataset import open_dataset, write_dataset
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.train import engine_from_config, load_config

DTYPES = ("bfloat16", "float8_e4m3")
MIXED = "paper=bf16,author=fp8"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("typed-compact")
    g = toy_mag(num_papers=80, num_authors=40, num_fields=6, featureless_fields=True, seed=4)
    out = {None: write_dataset(g, root / "plain")}
    for d in (*DTYPES, MIXED):
        out[d] = write_dataset(g, root / d.replace(",", "_"), feature_dtype=d)
    # the mixed dataset's values, as plain float32 tables (each type converted by its codec)
    rt = {
        t: feature_codec(d).round_trip(torch.from_numpy(np.asarray(g.x[t]))).numpy()
        for t, d in (("paper", "bf16"), ("author", "fp8"))
    }
    out["mixed-float"] = write_dataset(dataclasses.replace(g, x=rt), root / "mixed-float")
    return {k: str(v) for k, v in out.items()}


def _config(engine, dtype):
    return load_config(
        None,
        [
            f"train.engine={engine}",
            "train.dtype=float64",
            "train.batch_size=16",
            "train.fanouts=[3,2]",
            "model.name=rgcn",
            "model.hidden=6",
            "optim.optimizer=sgd",
            "optim.lr=0.5",
            "train.seed=7",
            "train.device=cpu",
            "store.device_budget=300B",  # rows from the device shards, host tier and disk
            "store.host_budget=600B",
            f"store.feature_dtype={'null' if dtype is None else dtype}",
        ],
    )


def _train(cfg, path, ctx=None):
    with engine_from_config(cfg, open_dataset(path), ctx) as eng:
        losses = [s.loss_sum for epoch in range(2) for s in eng.run_epoch(epoch)]
        params = {n: p.detach().clone() for n, p in eng.module.named_parameters()}
        store = getattr(eng, "store", None)
        return losses, params, store and (store.requests(), store.memory(), store.traffic)


def _assert_same(got, want, what):
    assert got[0] == want[0], what  # losses, bit for bit
    for name, value in want[1].items():
        assert torch.equal(got[1][name], value), (what, name)


def _ranks(comm, paths):
    ctx = context_of(comm)
    out = {}
    for engine in ("minibatch", "split"):
        for d in DTYPES:
            out[engine, d, "float32"] = _train(_config(engine, d), paths[None], ctx)
            out[engine, d, "compact"] = _train(_config(engine, None), paths[d], ctx)
    out["mixed", "float32"] = _train(_config("minibatch", None), paths["mixed-float"], ctx)
    out["mixed", "compact"] = _train(_config("minibatch", None), paths[MIXED], ctx)
    return out


@pytest.mark.slow
def test_minibatch_split_and_reference_match_the_converted_dataset(datasets):
    results = run_world(_ranks, 2, datasets, timeout_s=600)
    for res in results:
        for engine in ("minibatch", "split"):
            for d in DTYPES:
                _assert_same(res[engine, d, "compact"], res[engine, d, "float32"], (engine, d))
        _assert_same(res["mixed", "compact"], res["mixed", "float32"], "mixed")
        for d in DTYPES:  # the keyed store: every tier served, the same rows from each
            (req, mem, traffic), (req32, mem32, _) = (
                res["minibatch", d, "compact"][2],
                res["minibatch", d, "float32"][2],
            )
            assert req == req32 and mem == mem32
            assert all(req[k] > 0 for k in ("local", "peer", "host", "disk")), req
            assert traffic["disk"]["bytes"] > 0
    for d in DTYPES:
        ref = _train(_config("reference", d), datasets[None])
        _assert_same(_train(_config("reference", None), datasets[d]), ref, ("reference", d))


@pytest.mark.slow
def test_cli_prepares_mag_like_bf16_and_trains_rgcn(tmp_path, capsys):
    out = tmp_path / "mag-bf16"
    argv = ["prepare", "synthetic", "--preset", "mag-like", "--scale", "0.002"]
    assert main([*argv, "--feature-dtype", "bf16", "--out", str(out)]) == 0
    assert "128 (bfloat16)" in capsys.readouterr().out
    g = open_dataset(out)
    assert g.x["paper"].codec.name == "bfloat16"
    assert (out / "x" / "paper.npy").stat().st_size < 128 * 2 * g.schema.count("paper") + 256
    run = tmp_path / "run"
    train = ["train", "--dataset", str(out), "--model", "rgcn", "--epochs", "1", "--no-progress"]
    sets = ["--set", "train.engine=minibatch", "--set", "store.device_budget=20KB"]
    assert main([*train, "--run-dir", str(run), *sets]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert 0.0 <= summary["test_acc"] <= 1.0 and summary["epochs"] == 1


@pytest.mark.parametrize("engine", ["reference", "minibatch"])
def test_another_compact_dtype_is_refused_naming_the_type(datasets, engine):
    """store.feature_dtype=fp8 on tables stored bf16 would round them twice: one line."""
    with pytest.raises(GraphError, match=r"^features of node type 'paper': .*round them twice"):
        _train(_config(engine, "fp8"), datasets["bfloat16"])


def test_own_dtype_or_float32_reads_the_stored_values(datasets):
    """Unset, the stored dtype and float32 (exact widening) all read the same values."""
    want = _train(_config("reference", None), datasets["float8_e4m3"])
    for d in ("float8_e4m3", "float32"):
        _assert_same(_train(_config("reference", d), datasets["float8_e4m3"]), want, d)
