"""Node classification as a task: its loss terms and metrics, the label check made at load, and
the Trainer selecting on the task's metric."""

import io
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

from fleetgnn.config import load_config
from fleetgnn.engines.base import StepStats
from fleetgnn.engines.common import LabelRows, labels_and_masks, loss_sum, split_metrics
from fleetgnn.errors import GraphError
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.tasks import NODE_CLASSIFICATION, check_label_range, cross_entropy, task_of
from fleetgnn.train.trainer import Trainer
from tests.train.test_trainer import ScriptedEngine


def test_loss_terms_are_the_summed_cross_entropy_and_argmax_count():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 4, generator=g, dtype=torch.float64)
    target = torch.randint(0, 4, (9,), generator=g)
    terms = NODE_CLASSIFICATION.loss_terms(cross_entropy, logits, target)
    assert torch.allclose(terms.total, F.cross_entropy(logits, target, reduction="sum"))
    assert terms.correct == int((logits.argmax(1) == target).sum()) and terms.count == 9
    assert torch.equal(loss_sum(cross_entropy, logits, target), terms.total)


def test_split_metrics_are_the_task_evaluation():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(20, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (20,), generator=g)
    masks = {"train": torch.arange(20) < 10, "val": torch.arange(20) >= 15}
    got = split_metrics(logits, y, masks)
    pred = logits.argmax(1)
    assert got["train_acc"] == float((pred[:10] == y[:10]).double().mean())
    assert got["val_acc"] == float((pred[15:] == y[15:]).double().mean())
    assert got["val_loss"] == pytest.approx(float(F.cross_entropy(logits[15:], y[15:])))
    assert set(got) == {"train_acc", "val_acc", "val_loss"}


def test_labels_are_checked_once_at_load_masked_rows_only():
    y = np.array([0, 1, -1, 2, 7])
    check_label_range(y, [np.array([1, 1, 0, 1, 0], bool)], 3)  # -1 and 7 unmasked: fine
    with pytest.raises(GraphError, match=r"'y' holds label 7 .* 3 classes \[0, 3\)"):
        check_label_range(y, [np.array([0, 0, 0, 0, 1], bool)], 3)
    with pytest.raises(GraphError, match="holds label -1"):
        check_label_range(y, [np.array([0, 0, 1, 0, 0], bool)], 3)


def test_engines_load_paths_check_labels():
    graph = generate_graph(spec_for("tiny", 0.3), seed=1)
    c = int(graph.num_classes)
    y, _ = labels_and_masks(graph, num_classes=c)  # a valid dataset passes
    train = int(np.flatnonzero(np.asarray(graph.train_mask))[0])
    bad = np.array(graph.y, copy=True)
    bad[train] = c + 5
    masks = {f"{s}_mask": getattr(graph, f"{s}_mask") for s in ("train", "val", "test")}
    graph = types.SimpleNamespace(num_nodes=graph.num_nodes, y=bad, **masks)  # an edited file
    with pytest.raises(GraphError, match=f"holds label {c + 5}"):
        labels_and_masks(graph, num_classes=c)
    rows = LabelRows(bad, c)
    other = torch.tensor([(train + 1) % graph.num_nodes])
    assert torch.equal(rows[other], torch.from_numpy(bad[other.numpy()]))
    with pytest.raises(GraphError, match=f"holds label {c + 5}"):
        rows[torch.tensor([train])]


class _Scored:
    name, select_metric = "scored", "val_score"


def test_trainer_selects_on_the_task_metric(tmp_path: Path):
    assert task_of(object()) is NODE_CLASSIFICATION
    scores = [0.2, 0.9, 0.5]
    evals = [{"val_score": s, "test_score": 1 - s, "val_acc": 1 - s} for s in scores]
    eng = ScriptedEngine([StepStats(1.0, 1, 2)], evals)
    eng.task = _Scored()
    cfg = load_config(overrides=["train.epochs=3", "train.checkpoint_every=0"])
    console = Console(file=io.StringIO(), width=120)
    summary = Trainer.from_config(eng, cfg, tmp_path, console=console, show_progress=False).fit()
    assert summary["best_epoch"] == 1 and summary["val_score"] == 0.9
    assert summary["test_score"] == pytest.approx(0.1)
