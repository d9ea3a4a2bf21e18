"""Quality bar: GCN on real Cora with the paper's hyper-parameters reaches its published accuracy.

Kipf & Welling (2017) report 81.5% test accuracy for a 2-layer GCN on Cora's standard split
(140 / 500 / 1000 train / val / test). With fleetgnn's reference engine and the paper's settings
(hidden 16, dropout 0.5, Adam lr 0.01, weight decay 5e-4, 200 epochs, row-normalised features,
model selection at the best validation epoch; the row normalisation is not asked for: it is the
transform ``prepare planetoid`` records for the dataset, which training applies by default) five
seeds average what ``benchmarks/results/quality_cora.json`` records (docs/benchmarks.md's table,
held to it by tests/test_docs_numbers.py); the bar over five seeds is 80.5%. This test trains two
seeds (0 and 1) and asserts a mean of at least 80%.

The data is the Planetoid ``ind.cora.*`` pickles that ship with fleetgnn (``fleetgnn/data``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from rich.console import Console

import fleetgnn.train.checkpoint as ckmod
from fleetgnn.graph import Graph, open_dataset, write_dataset
from fleetgnn.graph.loaders import load_planetoid, planetoid
from fleetgnn.graph.loaders.bundled import DATA_DIR
from fleetgnn.train import Trainer, engine_from_config, load_config, read_metrics

PLANETOID = DATA_DIR / "planetoid"
SEEDS = (0, 1)
#: Mean test accuracy over SEEDS must reach this (paper: 81.5%; measured: quality_cora.json).
BAR = 0.80
PAPER_OVERRIDES = (
    "model.name=gcn",
    "model.num_layers=2",
    "model.hidden=16",
    "model.dropout=0.5",
    "optim.optimizer=adam",
    "optim.lr=0.01",
    "optim.weight_decay=5e-4",
    "train.engine=reference",
    "train.mode=full",
    "train.epochs=200",
    "train.checkpoint_every=0",
)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is not under test (the Trainer checkpoints every epoch end)."""
    monkeypatch.setattr(ckmod.os, "fsync", lambda fd: None)


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Cora is tiny: on a busy 2-core machine intra-op threads only spin against each other.

    One thread is several times faster there than the default (measured ~8x under load).
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def cora_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cora prepared as ``fleetgnn prepare planetoid`` does (with its customary feature_norm)."""
    graph = load_planetoid(PLANETOID, "cora")
    return write_dataset(
        graph, tmp_path_factory.mktemp("data") / "cora", feature_norm=planetoid.FEATURE_NORM
    )


@pytest.fixture(scope="module")
def cora(cora_dir: Path) -> Graph:
    """The prepared Cora, opened (mmap)."""
    return open_dataset(cora_dir)


def test_cora_is_the_standard_split(cora: Graph) -> None:
    """The numbers below mean what the paper's mean: same graph, same split."""
    assert (cora.num_nodes, cora.num_edges, cora.num_features) == (2708, 10556, 1433)
    assert cora.num_classes == 7
    counts = [int(m.sum()) for m in (cora.train_mask, cora.val_mask, cora.test_mask)]
    assert counts == [140, 500, 1000]


def test_gcn_reaches_paper_accuracy(cora: Graph, cora_dir: Path, tmp_path: Path) -> None:
    """Mean test accuracy at the best-validation epoch over SEEDS is >= BAR, with defaults."""
    accs = []
    for seed in SEEDS:
        cfg = load_config(
            None, [*PAPER_OVERRIDES, f"train.seed={seed}", f"data.dataset={cora_dir}"]
        )
        run_dir = tmp_path / f"seed{seed}"
        engine = engine_from_config(cfg, cora)
        assert engine.config.feature_norm == "row"  # the dataset's, not asked for
        trainer = Trainer.from_config(
            engine,
            cfg,
            run_dir,
            show_progress=False,
            console=Console(quiet=True),
        )
        summary = trainer.fit()
        assert summary["epochs"] == 200
        # model selection: the reported test accuracy is the one at the best validation epoch
        records = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["evaluated"]]
        assert len(records) == 200
        best_val = max(r["val_acc"] for r in records)
        best = next(r for r in records if r["epoch"] == summary["best_epoch"])
        assert summary["val_acc"] == pytest.approx(best_val)
        assert best["val_acc"] == pytest.approx(best_val)
        assert summary["test_acc"] == pytest.approx(best["test_acc"])
        accs.append(float(summary["test_acc"]))
    mean = statistics.mean(accs)
    assert mean >= BAR, (
        f"mean test accuracy {mean:.4f} over seeds {SEEDS} ({accs}) is below {BAR}; "
        f"the GCN paper reports 0.815; fleetgnn's 5 seeds: benchmarks/results/quality_cora.json"
    )


def test_offload_readme_command_follows_the_reference_trajectory(cora_dir: Path, tmp_path: Path):
    """README's ``fleetgnn train --engine offload ... --set offload.chunks=8`` on real Cora: the
    same per-epoch losses as the reference engine's full-graph run, and the paper's accuracy."""
    from fleetgnn.cli.main import main

    runs = {}
    for engine, extra in (("offload", ["--set", "offload.chunks=8"]), ("reference", [])):
        run = tmp_path / engine
        argv = ["train", "--engine", engine, "--dataset", str(cora_dir), "--model", "gcn"]
        argv += ["--mode", "full", "--epochs", "40", "--run-dir", str(run), "--quiet", *extra]
        assert main(argv) == 0
        runs[engine] = [r for r in read_metrics(run / "metrics.jsonl") if "loss" in r]
    off, ref = runs["offload"], runs["reference"]
    assert len(off) == len(ref) == 40
    for a, b in zip(off, ref, strict=True):  # float32: the order of sums differs
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4), a["epoch"]
    assert off[-1]["extra"]["chunks"] == 8 and off[-1]["extra"]["cached_layers"] == [0, 1]
    assert off[-1]["test_acc"] == pytest.approx(ref[-1]["test_acc"], abs=0.005)
    assert off[-1]["test_acc"] >= 0.75  # 40 epochs (the reference reaches the same)


def _paper_run(
    cora: Graph, cora_dir: Path, run_dir: Path, seed: int, extra=()
) -> tuple[float, float]:
    """Test accuracy at the best validation epoch and the last training loss of one run."""
    cfg = load_config(
        None, [*PAPER_OVERRIDES, f"train.seed={seed}", f"data.dataset={cora_dir}", *extra]
    )
    engine = engine_from_config(cfg, cora)
    trainer = Trainer.from_config(
        engine, cfg, run_dir, show_progress=False, console=Console(quiet=True)
    )
    acc = float(trainer.fit()["test_acc"])
    losses = [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    return acc, float(losses[-1])


def test_bf16_gcn_reaches_the_float32_accuracy_within_one_point(
    cora: Graph, cora_dir: Path, tmp_path: Path
) -> None:
    """``train.autocast=bf16`` (bf16 matrix products, float32 weights, loss and reductions):
    mean test accuracy over SEEDS within 1 point of float32's (measured on CPU: 0.822 / 0.820
    for seeds 0 / 1, both precisions; the training losses differ)."""
    fp32, bf16 = [], []
    for seed in SEEDS:
        acc, loss = _paper_run(cora, cora_dir, tmp_path / f"f{seed}", seed)
        acc_b, loss_b = _paper_run(
            cora, cora_dir, tmp_path / f"b{seed}", seed, ["train.autocast=bf16"]
        )
        assert loss_b != loss  # the bf16 run computed in bf16
        fp32.append(acc)
        bf16.append(acc_b)
    print(f"Cora GCN test accuracy, seeds {SEEDS}: float32 {fp32}, bf16 {bf16}")
    assert statistics.mean(bf16) >= statistics.mean(fp32) - 0.01, (fp32, bf16)
    assert statistics.mean(bf16) >= BAR, (fp32, bf16)
