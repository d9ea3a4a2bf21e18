"""Issue 42, finding 3: settings that trained silently wrong, now refused in one line.

A learning-rate schedule whose arguments torch takes but that make every parameter NaN
(``StepLR(step_size=-1, gamma=nan)``), and a user's model whose output does not have one column
per class (12 outputs for 7 classes trained to 0.295 with no word; fewer outputs than classes
failed inside the loss with torch's "Target 5 is out of bounds").
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import fleetgnn
from fleetgnn.cli.main import main
from fleetgnn.errors import ConfigError
from fleetgnn.graph import open_dataset, write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.nn import LayerwiseModule, SAGEConv


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graph = generate_graph(spec_for("tiny", 0.3), seed=1)
    return write_dataset(graph, tmp_path_factory.mktemp("d") / "tiny")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            "{step_size: -1, gamma: .nan}",
            "train.lr_scheduler_args.step_size=-1 is invalid for StepLR: it must be an int >= 1 "
            "(e.g. step_size: 10)",
        ),
        (
            "{step_size: 2, gamma: .nan}",
            "train.lr_scheduler_args.gamma=nan is invalid for StepLR: it must be a finite number",
        ),
        (
            "{step_size: 2, gamma: -0.5}",
            "train.lr_scheduler_args.gamma=-0.5 is invalid for StepLR: it must be a number > 0 "
            "(e.g. gamma: 0.5)",
        ),
    ],
)
def test_scheduler_arguments_that_poison_the_learning_rate_are_refused(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: str, says: str
):
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(tiny), "--run-dir", str(run), "--quiet"]
    argv += ["--set", "train.lr_scheduler=StepLR", "--set", f"train.lr_scheduler_args={args}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fleetgnn train: error: {says}"]
    assert not run.exists()


class _Sage(LayerwiseModule):
    """Two SAGE layers whose last one has ``out`` features, whatever the dataset's classes."""

    def __init__(self, in_dim: int, out: int) -> None:
        super().__init__(2)
        self.convs = nn.ModuleList([SAGEConv(in_dim, 8), SAGEConv(8, out)])

    def layer_forward(self, i, agg, h_src, *, step=0):  # noqa: D102
        h = self.convs[i](agg, h_src)
        return torch.relu(h) if i == 0 else h


@pytest.mark.parametrize("out", [12, 2])
def test_a_model_without_one_output_per_class_is_refused_at_the_first_batch(
    tiny: Path, tmp_path: Path, out: int
):
    graph = open_dataset(tiny)
    classes = int(graph.num_classes)
    assert classes == 4 and out != classes
    torch.manual_seed(0)
    model = _Sage(graph.num_features, out)
    cfg = fleetgnn.ReferenceEngineConfig(fanouts=[5, 5], batch_size=64)
    with fleetgnn.build_engine(model, graph, cfg) as engine:
        config = fleetgnn.TrainerConfig(epochs=1)
        trainer = fleetgnn.Trainer(engine, config, tmp_path / "run", quiet=True)
        with pytest.raises(ConfigError) as caught:
            trainer.fit()
    line = str(caught.value)
    rows = line.split("returns [", 1)[1].split(",", 1)[0]  # the first batch's training nodes
    assert line == (
        f"the model _Sage returns [{rows}, {out}] on the first batch; node classification on "
        f"this dataset expects [{rows}, 4] (one score per class, 4 classes): make its last layer "
        f"output 4 features (e.g. out_channels=4)"
    ), line


@pytest.mark.parametrize(("case", "inputs", "outputs"), [("wide", None, 12), ("input", 500, 4)])
def test_a_pyg_model_of_the_wrong_shape_is_one_line_naming_it(
    tiny: Path, tmp_path: Path, case: str, inputs: int | None, outputs: int
):
    """A PyG model adapted with ``from_pyg``: 12 outputs for the dataset's classes trained with
    no word, and one built for other features failed with torch's "mat1 and mat2 shapes cannot
    be multiplied"."""
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    from fleetgnn.nn import from_pyg

    graph = open_dataset(tiny)
    torch.manual_seed(0)
    sage = pyg_nn.GraphSAGE(inputs or graph.num_features, 8, num_layers=2, out_channels=outputs)
    cfg = fleetgnn.ReferenceEngineConfig(fanouts=[5, 5], batch_size=64)
    with fleetgnn.build_engine(from_pyg(sage), graph, cfg) as engine:
        config = fleetgnn.TrainerConfig(epochs=1)
        trainer = fleetgnn.Trainer(engine, config, tmp_path / "run", quiet=True)
        with pytest.raises(ConfigError) as caught:
            trainer.fit()
    line = str(caught.value)
    if case == "input":
        assert line == (
            f"the model from_pyg(GraphSAGE) takes 500 input features per node (its first layer's "
            f"in_channels) but the dataset's rows have {graph.num_features}: build it with "
            f"in_channels={graph.num_features}"
        ), line
    else:
        rows = line.split("returns [", 1)[1].split(",", 1)[0]
        assert line == (
            f"the model from_pyg(GraphSAGE) returns [{rows}, 12] on the first batch; node "
            f"classification on this dataset expects [{rows}, 4] (one score per class, 4 "
            f"classes): make its last layer output 4 features (e.g. out_channels=4)"
        ), line
