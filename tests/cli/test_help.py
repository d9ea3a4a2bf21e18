"""What the command line tells before anything runs: every default in --help, the config keys
(--list-keys), the nearest valid choice for a typo; and config.yaml recording what ran."""

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fleetgnn.cli.main import build_parser, main
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for

ROOT = Path(__file__).resolve().parents[2]


def _parsers(p, name="fleetgnn"):
    yield name, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for n, sp in a.choices.items():
                yield from _parsers(sp, f"{name} {n}")


def test_every_option_with_a_default_shows_it():
    missing = []
    for name, p in _parsers(build_parser()):
        fmt = p._get_formatter()
        for a in p._actions:
            if not a.option_strings or a.required or a.nargs == 0:
                continue
            if a.default is None or isinstance(a.default, bool) or a.default == []:
                continue
            if "default" not in (fmt._expand_help(a) if a.help else ""):
                missing.append(f"{name} {a.option_strings[0]}")
    assert not missing, missing


def test_train_help_shows_the_defaults_and_how_to_list_the_keys(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in (
        "model.name (default: sage)",
        "train.epochs (default: 10)",
        "train.seed (default: 0)",
        "train.batch_size=1024",
        "optim.lr=0.01",
        "gcn:16",
        "--list-keys",
        "a --config file is YAML",
    ):
        assert text in out, text


def test_list_keys_prints_every_key_with_its_default(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--list-keys"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()[1:-1]
    rows = {ln.split()[0]: ln.split()[1] for ln in lines if ln[2] != " "}
    assert rows["train.epochs"] == "10" and rows["optim.lr"] == "0.01"
    assert rows["model.name"] == "sage" and rows["train.batch_size"] == "1024"
    assert rows["fullgraph.tuner_chunks"] == "[1," and len(rows) > 50
    # each key's help, from the docstring of the class that declares it, follows it indented
    helps = [ln.strip() for ln in lines if ln.startswith(" " * 6)]
    assert "Number of epochs (>= 1)." in helps


@pytest.mark.parametrize(
    ("argv", "guess"),
    [
        (["train", "--model", "gnc"], "gcn"),
        (["train", "--engine", "fulgraph"], "fullgraph"),
        (["trian"], "train"),
        (["partition", "x", "--parts", "2", "--method", "metsi"], "metis"),
    ],
)
def test_an_invalid_choice_names_the_nearest_one(argv, guess, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert f"did you mean '{guess}'?" in err and "Traceback" not in err
    # one line: the usage block no longer comes first (-h shows it)
    assert err.count("\n") == 1 and err.startswith("fleetgnn") and err.rstrip().endswith(" -h)")


def test_config_yaml_records_the_mode_and_no_synthetic_preset_for_a_dataset(tmp_path, capsys):
    data = write_dataset(generate_graph(spec_for("tiny", 0.2), seed=1), tmp_path / "d")
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--epochs", "1", "--run-dir", str(run)]
    assert main([*argv, "--no-progress", "--set", "train.batch_size=64"]) == 0
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["train"]["mode"] == "minibatch"  # the reference engine's default, not null
    assert "preset" not in cfg["data"] and cfg["data"]["dataset"] == str(data.absolute())
    out = " ".join(capsys.readouterr().out.split())
    assert "train_acc" in out and "training-mode accuracy over that epoch's batches" in out
    # the run resumes from what it recorded
    assert main(["train", "--resume", str(run), "--epochs", "2", "--no-progress"]) == 0


#: Builds the parser, loads a config file whose topology is a file, checks the topology the way
#: ``fleetgnn train`` does before a run starts, and prints the torch modules that got imported.
_TORCH_FREE = """
import sys
from fleetgnn.cli.main import build_parser
from fleetgnn.cli.train import check_topology
from fleetgnn.config import load_config

args = build_parser().parse_args(["train", "--config", sys.argv[1]])
cfg = load_config(args.config, [])
assert cfg.train.engine == "minibatch" and cfg.train.nproc == 2, cfg.train
check_topology(cfg, None)
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""


@pytest.mark.slow  # a fresh interpreter: this one has imported torch long ago
def test_parser_config_and_topology_need_no_torch(tmp_path):
    """What a refusal of a config or a topology file runs never imports torch (~250 MB)."""
    (tmp_path / "topo.yaml").write_text("bandwidth: [[700, 50], [50, 700]]\n")
    (tmp_path / "c.yaml").write_text(
        textwrap.dedent(f"""\
            train:
              engine: minibatch
              nproc: 2
            store:
              topology: {tmp_path / "topo.yaml"}
            """)
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _TORCH_FREE, str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_plan_help_lists_the_hardware_profiles(capsys):
    """The epilog that names the cost model's profiles is made when the help is shown."""
    from fleetgnn.cost import PROFILES

    with pytest.raises(SystemExit) as done:
        main(["plan", "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"hardware profiles: local (measured on this machine), {', '.join(PROFILES)}" in out
