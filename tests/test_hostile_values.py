"""Bad values in a dataset too large for a full check at every open (issue 13, defect 7).

Such a dataset (above ``_FULL_CHECK_LIMIT`` elements; here the limit is lowered so that a tiny
dataset counts as large) used to be opened with a layout check only, so an out-of-range index,
a label 999 or a NaN written into it after ``prepare`` passed ``info`` and surfaced later as a
traceback. Now every command refuses it in one line (exit 2).
"""

import warnings

import numpy as np
import pytest

import fleetgnn.graph.dataset.reader as dataset_mod
from fleetgnn.cli.main import main
from fleetgnn.errors import DatasetError
from fleetgnn.graph import from_edges, open_dataset, write_dataset


@pytest.fixture
def big(tmp_path, monkeypatch):
    """A dataset that counts as large (the limit is lowered to 100 elements)."""
    monkeypatch.setattr(dataset_mod, "_FULL_CHECK_LIMIT", 100)
    rng = np.random.default_rng(0)
    n, e = 300, 2400
    y = rng.integers(0, 4, n)
    g = from_edges(
        rng.integers(0, n, e),
        rng.integers(0, n, e),
        n,
        node_data={
            "x": rng.standard_normal((n, 6)).astype(np.float32),
            "y": y,
            "train_mask": np.arange(n) < 100,
            "val_mask": (np.arange(n) >= 100) & (np.arange(n) < 150),
            "test_mask": np.arange(n) >= 150,
        },
        num_classes=4,
        name="big",
    )
    return write_dataset(g, tmp_path / "big")


def _corrupt(root, kind):
    name, pos, value = {
        "index": ("indices", 1234, 300),
        "label": ("y", 42, 999),
        "nan": ("x", (77, 3), np.nan),
    }[kind]
    arr = np.load(root / f"{name}.npy")
    arr[pos] = value
    np.save(root / f"{name}.npy", arr)


MESSAGES = {
    "index": "'indices' holds node ID 300 at edge 1234, outside the valid interval [0, 300)",
    "label": "'y' holds label 999 at node 42, outside the valid interval [0, 4)",
    "nan": "'x' holds a non-finite value nan at node 77, feature 3",
}


def _one_line_error(capsys, argv, command):
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(f"fleetgnn {command}: error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize("kind", ["index", "label", "nan"])
def test_open_refuses_bad_values_written_after_prepare(big, kind):
    open_dataset(big)  # clean and stamped
    _corrupt(big, kind)
    with (
        pytest.warns(UserWarning, match="checking every value .* was modified since"),
        pytest.raises(DatasetError, match=r"is invalid: ") as err,
    ):
        open_dataset(big)
    assert MESSAGES[kind] in str(err.value)


@pytest.mark.parametrize("kind", ["index", "label", "nan"])
def test_info_partition_train_refuse_in_one_line(big, kind, tmp_path, capsys):
    _corrupt(big, kind)
    for command, argv in (
        ("info", ["info", str(big)]),
        ("partition", ["partition", str(big), "--method", "range", "--parts", "2", "--no-save"]),
        (
            "train",
            ["train", "--dataset", str(big), "--epochs", "1", "--run-dir", str(tmp_path / "r")],
        ),
    ):
        with pytest.warns(UserWarning, match="checking every value .* was modified since"):
            line = _one_line_error(capsys, argv, command)
        assert MESSAGES[kind] in line, (command, line)
    assert not (tmp_path / "r" / "summary.json").exists()


def test_info_verify_checks_and_restamps(big, capsys):
    (big / dataset_mod.STAMP).unlink()  # as written by an older fleetgnn
    with pytest.warns(UserWarning, match="checking every value .* has no verified.json"):
        assert main(["info", str(big), "--json"]) == 0  # checked once, stamped
    assert '"stamp_valid": true' in capsys.readouterr().out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["info", str(big), "--json"]) == 0
        assert main(["info", str(big), "--verify", "--json"]) == 0
    _corrupt(big, "label")
    line = _one_line_error(capsys, ["info", str(big), "--verify"], "info")
    assert MESSAGES["label"] in line
