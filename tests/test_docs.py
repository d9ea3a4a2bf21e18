"""The documentation's commands and links: every command of a ```bash block in the README and in
docs/ is run here (on the bundled Cora or a small synthetic graph, one epoch) or listed in
NOT_RUN with the reason; relative links resolve; the generated reference covers every config key
and every command."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _nav_pages(item):
    """The pages of mkdocs.yml's nav, in reading order."""
    if isinstance(item, str):
        yield item
    elif isinstance(item, list):
        for x in item:
            yield from _nav_pages(x)
    else:
        for x in item.values():
            yield from _nav_pages(x)


NAV = list(_nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]))
PAGES = [ROOT / "README.md", *(DOCS / page for page in NAV)]

#: Commands the tests do not run, and why (the exact command as the docs write it, a loop as a
#: whole; continuation lines joined, comments dropped).
NOT_RUN = {
    "pip install torch==2.13.0 && pip install -e . && fleetgnn train": "installs packages: .ci/run "
    "does in a fresh venv; `fleetgnn train` is test_readme's Quick start test",
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install -e "
    ". && fleetgnn train": "installs packages from PyTorch's index; `fleetgnn train` is "
    "test_readme's Quick start test",
    "pip install -e '.[dev]' && python -m pytest -q": "installs packages and runs the whole suite: "
    "what .ci/run does",
    "python -m pytest -q -m 'not slow'": "the test suite itself",
    "fleetgnn prepare planetoid --root path/to/planetoid --name citeseer --out data/citeseer": (
        "needs CiteSeer's Planetoid files, not shipped (the same loader runs on Cora here)"
    ),
    "fleetgnn prepare ogb --root path/to/ogbn_products --undirected --out data/products": (
        "needs ogbn-products' raw files; tests/graph/test_loaders_ogb.py tests the loader"
    ),
    "fleetgnn prepare ogb --root path/to/ogbn_mag --add-reverse --out data/mag": (
        "needs ogbn-mag's raw files; tests/graph/test_loaders_ogb_hetero.py writes the layout and "
        "tests the loader, tests/cli/test_typed_cli.py the command"
    ),
    "fleetgnn prepare ogb --root path/to/ogbn_mag --add-reverse --feature-dtype paper=bf16 "
    "--out data/mag-bf16": (
        "needs ogbn-mag's raw files; tests/graph/test_loaders_ogb_hetero.py writes the layout and "
        "tests the loader with feature_dtype"
    ),
    "fleetgnn prepare edgelist --edges interactions.txt --features x.npy --undirected --out "
    "data/int": (
        "needs the user's interaction edge list; tests/cli/test_link_without_labels_cli.py writes "
        "one without labels, prepares it and trains link prediction on it"
    ),
    "fleetgnn train --task link --dataset data/int --epochs 20": (
        "trains the dataset the command above prepares; tests/cli/test_link_without_labels_cli.py"
    ),
    "fleetgnn prepare pyg --root ~/pyg_data --name Cora --out data/cora-pyg": "needs PyG's "
    "processed Cora on disk (PyG downloads it); tests/graph/test_loaders_pyg_dataset.py",
    "fleetgnn train --engine minibatch --nproc 4 --dataset data/products-0.05 "
    "--set store.device_budget=64MB --set store.host_budget=1GB --set train.fanouts=[15,10,5] "
    "--set model.num_layers=3 --max-restarts 2": "starts 4 processes (over 30 s on 2 cores); "
    "tests/engines/test_minibatch.py and test_fault_tolerance.py run the engine and restarts",
    "fleetgnn train --dataset data/mag-tiny --model rgat --engine minibatch --nproc 2 --epochs 10 "
    "--set train.batch_size=256 --run-dir runs/rgat2": "starts 2 processes; "
    "tests/cli/test_typed_cli.py::test_train_typed_minibatch_at_two_processes runs it",
    "torchrun --nnodes 2 --nproc-per-node 8 ... -m fleetgnn train --engine minibatch ...": (
        "a sketch for two hosts of 8 devices"
    ),
    "fleetgnn train --engine split --nproc 2 --dataset data/cora --model sage --epochs 50 "
    "--set data.feature_norm=row --set train.fanouts=[10,10] --set train.batch_size=32": "starts "
    "2 processes (15 s); tests/engines/test_split.py::test_split_engine_through_the_cli runs it",
    "fleetgnn train --dataset data/tl --engine minibatch --nproc 2 --epochs 20": "starts 2 "
    "processes; tests/engines/test_node_temporal_minibatch.py trains the engine at W = 1..3",
    "fleetgnn train --dataset data/tl --engine split --nproc 2 --epochs 20": "starts 2 "
    "processes; tests/engines/test_node_temporal_split.py trains the engine at W = 1..3",
    "fleetgnn train --dataset data/tl --task link --engine split --nproc 2 --epochs 5 --set "
    "train.eval_edges=2000": "starts 2 processes; tests/engines/test_link_temporal_split.py::"
    "test_split_engine_trains_temporal_links_through_the_cli runs it",
    "fleetgnn train --dataset data/mag-tiny --model rgcn --engine split --nproc 2 --epochs 10 "
    "--set train.batch_size=256 --run-dir runs/rgcn-split": "starts 2 processes; "
    "tests/cli/test_typed_cli.py::test_train_typed_split_at_two_processes runs it",
    "fleetgnn train --engine split --nproc 2 --dataset data/mag-small --model rgcn --epochs 1": (
        "starts 2 processes; tests/cli/test_typed_cli.py::test_train_typed_split_at_two_processes"
    ),
    "fleetgnn train --dataset data/mag-tiny --model rgcn --task link --engine split --nproc 2 "
    "--set train.link_relation=paper,cites,paper --set train.fanouts=[5,5] --set "
    "train.batch_size=256 --run-dir runs/cites-split": "starts 2 processes; tests/cli/"
    "test_typed_link_cli.py::test_mag_like_link_on_split_at_two_processes_prints_test_auc",
    "fleetgnn train --dataset data/mag-times --model rgcn --engine minibatch --nproc 2 --epochs "
    "1 --run-dir runs/mag-times-2": "starts 2 processes; tests/cli/test_typed_time_cli.py::"
    "test_minibatch_two_ranks_trains_typed_nodes_in_time runs it",
    "fleetgnn train --task link --engine fullgraph --nproc 2 --dataset data/cora --model gcn": (
        "starts 2 processes; tests/engines/test_link_fullgraph.py runs the engine at W = 1..3"
    ),
    "fleetgnn train --task link --engine split --nproc 2 --dataset data/cora --model sage "
    "--set train.fanouts=[10,5] --set train.batch_size=512": "starts 2 processes; "
    "tests/engines/test_link_split.py runs the engine at W = 1..3 and through the CLI",
    "fleetgnn train --engine fullgraph --nproc 4 --model gcn --dataset data/products-0.05": (
        "starts 4 processes (over 30 s on 2 cores); tests/engines/test_fullgraph.py runs the engine"
    ),
    "fleetgnn train --engine offload --nproc 2 --model gcn --dataset data/products-0.05 "
    "--set offload.device_budget=64MiB": "starts 2 processes; tests/engines/test_offload.py runs "
    "the engine with several ranks and a device budget",
    "fleetgnn train --engine auto --dataset data/cora --model gcn --nproc 2": "measures this "
    "machine and starts 2 processes; tests/cost/test_target.py and test_planner.py",
    "torchrun --standalone --nproc-per-node 2 examples/custom_model.py --dataset data/cora "
    "--engine fullgraph --epochs 60": "starts 2 processes; tests/examples/test_custom_model.py "
    "runs the example with 2 processes",
    "torchrun --standalone --nproc-per-node 2 examples/pyg_model.py --dataset data/cora "
    "--engine fullgraph --epochs 60": "starts 2 processes; tests/examples/test_pyg_model.py runs "
    "the example with 2 processes",
    "fleetgnn embed runs/sage --layer 1 --out emb/sage --checkpoint last --nproc 2": "starts 2 "
    "processes (15 s); tests/cli/test_infer_cli.py exports with --nproc 2 and embeds",
    "fleetgnn plan --dataset data/cora --model gcn --nproc 2 --mode full": "measures this machine "
    "(~10 s, a gloo probe between 2 processes); the --shape plans run here",
    "fleetgnn plan --dataset data/cora --model gcn --target-acc 0.7 --probe-epochs 100": "measures "
    "this machine (~10 s); tests/cost/test_target.py tests --probe-epochs",
    "fleetgnn plan --dataset data/cora --model gcn --target-acc 0.7 --history runs/full "
    "runs/sampled": "measures this machine (~10 s); tests/cost/test_target.py tests --history",
    "for s in 0 1 2 3 4; do fleetgnn train --dataset data/cora --model gcn --mode full "
    "--epochs 200 --seed $s --set data.feature_norm=row --set optim.lr=0.01 "
    "--set optim.weight_decay=5e-4; "
    "fleetgnn train --dataset data/cora --model gat --mode full --epochs 200 --seed $s "
    "--set data.feature_norm=row --set optim.lr=0.005 --set optim.weight_decay=5e-4; "
    "fleetgnn train --dataset data/cora --model sage --mode minibatch --epochs 50 --seed $s "
    "--set data.feature_norm=row --set train.fanouts=[10,10] --set train.batch_size=32; done": (
        "15 trainings: benchmarks/quality_cora.py runs them into benchmarks/results/"
        "quality_cora.json, which tests/test_docs_numbers.py holds the table to"
    ),
    "fleetgnn bench --quick --only ops --out /tmp/bench": "17 s on 2 cores; tests/cli/test_bench.py"
    " runs the quick ops suite",
    "fleetgnn bench --cora data/cora --out benchmarks/results/bench "
    "--readme benchmarks/README.md": "the whole benchmark suite, rewriting benchmarks/README.md",
}

#: What the run changes so that a command is cheap: the graph's scale and the probe's epochs.
SHRINK = {"--scale 0.05": "--scale 0.005"}


def _commands(text):
    """Each command of the ```bash blocks: continuation lines joined, comments dropped; a shell
    loop is one command, its lines joined by '; '."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines = [re.sub(r"(^|\s+)#.*$", "", line).strip() for line in block.split("\n")]
        joined, cur = [], ""
        for line in lines:
            if line.endswith("\\"):
                cur += line[:-1].strip() + " "
                continue
            cur += line
            if cur.strip():
                joined.append(" ".join(cur.split()))
            cur = ""
        loop = []
        for line in joined:
            if loop or line.startswith("for "):
                loop.append(line)
                if line == "done":
                    out.append("; ".join(loop).replace("do; ", "do "))
                    loop = []
            else:
                out.append(line)
        assert not loop, block
    return out


def docs_commands():
    """Every command of the docs, in reading order (README first), each once."""
    seen = {}
    for page in PAGES:
        for cmd in _commands(page.read_text()):
            seen.setdefault(cmd, page)
    return seen


def test_every_command_is_run_or_listed_with_a_reason():
    commands = docs_commands()
    assert len(commands) > 30
    stale = set(NOT_RUN) - set(commands)
    assert not stale, f"NOT_RUN names commands the docs no longer have: {stale}"
    for cmd, page in commands.items():
        if cmd in NOT_RUN:
            continue
        assert cmd.startswith(("fleetgnn ", "python examples/")), (page, cmd)


def _setup(cwd):
    """The files the docs' commands read as 'files you have'."""
    rng = np.random.default_rng(0)
    n = 1600  # the default split takes 20 per class, 500 and 1000 nodes
    np.savetxt(cwd / "edges.txt", rng.integers(0, n, size=(6000, 2)), fmt="%d")
    pairs, attr = rng.integers(0, n, size=(6000, 2)), rng.standard_normal((6000, 3))
    lines = [f"{s} {d} " + " ".join(f"{v:.4f}" for v in a) for (s, d), a in zip(pairs, attr)]
    (cwd / "edges_attr.txt").write_text("\n".join(lines) + "\n")  # src dst a_1 a_2 a_3
    times = np.random.default_rng(1).integers(0, 10_000, size=(6000, 1))  # rng left as it was
    np.savetxt(cwd / "events.txt", np.hstack([pairs, times]), fmt="%d")  # src dst time
    node_time = np.random.default_rng(2).integers(0, 10_000, size=n)  # one per node of events
    np.save(cwd / "node_time.npy", node_time)
    np.save(cwd / "x.npy", rng.standard_normal((n, 8)).astype(np.float32))
    np.save(cwd / "y.npy", rng.integers(0, 3, size=n))
    (cwd / "my.yaml").write_text("data:\n  dataset: data/cora\nmodel:\n  name: sage\n")


#: Run directories the docs' commands read, made by a one-epoch run on Cora just before.
RUNS = {
    "runs/gcn-s0": ["--model", "gcn", "--mode", "full"],
    "runs/gcn-fullgraph": ["--model", "gcn", "--mode", "full"],
}


def _fleetgnn(argv, cwd):
    from fleetgnn.cli.main import main

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        return main(argv)


@pytest.mark.slow
def test_docs_commands_run(tmp_path, monkeypatch, capsys):
    """Every command not in NOT_RUN runs and exits 0, in reading order: `fleetgnn` in this
    process (train for one epoch, quietly, in a run directory of its own unless the command
    names one), examples as scripts."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    cwd = tmp_path / "work"
    cwd.mkdir()
    _setup(cwd)
    ran = []
    for i, (cmd, page) in enumerate(docs_commands().items()):
        if cmd in NOT_RUN:
            continue
        for big, small in SHRINK.items():
            cmd = cmd.replace(big, small)
        argv = shlex.split(cmd)
        for run, extra in RUNS.items():
            if run in argv and not (cwd / run).exists():
                base = ["train", "--dataset", "data/cora", "--epochs", "1", "--quiet"]
                assert _fleetgnn([*base, *extra, "--run-dir", run], cwd) == 0, run
        if argv[0] == "python":
            script = [sys.executable, str(ROOT / argv[1]), *argv[2:], "--epochs", "1"]
            done = subprocess.run(script, cwd=cwd, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (page.name, cmd, done.stderr[-2000:])
            ran.append(cmd)
            continue
        argv = argv[1:]
        if argv[0] == "train" and "--resume" not in argv:
            argv += ["--epochs", "1", "--quiet"]
            if "--run-dir" not in argv:
                argv += ["--run-dir", f"runs/docs-{i}"]
        if argv == ["--version"]:
            with pytest.raises(SystemExit) as exit_:
                _fleetgnn(argv, cwd)
            assert exit_.value.code == 0
        else:
            code = _fleetgnn(argv, cwd)
            assert code == 0, (page.name, cmd, capsys.readouterr().err[-2000:])
        ran.append(cmd)
    assert len(ran) >= 20, ran
    assert (cwd / "preds" / "gcn" / "predictions.npy").is_file()
    assert (cwd / "runs" / "gcn-s0" / "report.png").is_file()


def _slug(heading):
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[^\w\s-]", "", text).replace(" ", "-")


def test_docs_links_resolve():
    """Relative links of the README and of docs/ name files that exist and headings they have;
    docs/ links stay inside docs/ (the site has nothing else)."""
    for page in PAGES:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.is_file(), (page.name, target)
            if page.parent != ROOT:
                assert DOCS in dest.parents, (page.name, target)
            if anchor:
                headings = re.findall(r"^#+ (.*)$", dest.read_text(), re.M)
                assert anchor in {_slug(h) for h in headings}, (page.name, target)


def test_every_page_is_in_the_nav_and_the_readme_links_the_docs():
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages == set(NAV) and len(NAV) == len(set(NAV))
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    for page in ("data", "partitioning", "training", "planning", "inference", "safety"):
        assert f"(docs/{page}.md)" in readme, page


def test_generated_reference_covers_every_key_and_command():
    """The build hook's pages: every config key (`--list-keys`) and every command's --help."""
    sys.path.insert(0, str(DOCS))
    try:
        import hooks
    finally:
        sys.path.remove(str(DOCS))
    from fleetgnn.cli.main import _COMMANDS
    from fleetgnn.config.run import config_keys

    table = hooks.config_keys()
    for key, *_ in config_keys():
        assert f"| `{key}` |" in table, key
    cli = hooks.cli_help()
    for command in _COMMANDS:
        assert f"## fleetgnn {command}\n" in cli, command
    assert "### fleetgnn prepare synthetic" in cli and "--list-keys" in cli
    page = (DOCS / "reference" / "config.md").read_text()
    assert hooks.on_page_markdown(page, None, None, None).count("| `train.") > 10


def test_python_api_names_every_engine_config():
    """docs/python-api.md's list of engines and their configs has every registered engine's."""
    import fleetgnn

    text = (DOCS / "python-api.md").read_text()
    section = text[text.index("- Engines and their configs:") :].split("\n- ")[0]
    for name, spec in fleetgnn.ENGINES.items():
        assert f"`{spec.config_cls.__name__}`" in section, name


def _options(cmd, drop=()):
    """``--flag value`` pairs of a ``fleetgnn train`` command, without the flags in ``drop``."""
    argv = shlex.split(cmd)[2:]
    pairs = dict(zip(argv[::2], argv[1::2], strict=True))
    return {k: v for k, v in pairs.items() if k not in drop}


def test_readme_two_process_run_is_the_first_run_on_two_processes():
    """README calls its `--nproc 2` command "the same run": it must differ from the Cora run
    above it only in how it runs (engine, processes, run directory; fullgraph is always full
    graph), not in what it trains (it once dropped `--epochs 200`: 10 epochs, 0.697 instead of
    ~0.82). That the fullgraph engine then follows the reference trajectory is
    tests/engines/test_fullgraph.py's parity."""
    commands = _commands((ROOT / "README.md").read_text())
    first = next(c for c in commands if c.startswith("fleetgnn train --dataset data/cora"))
    two = next(c for c in commands if "--nproc 2" in c and "data/cora" in c)
    how = ("--run-dir", "--engine", "--nproc", "--mode")
    assert _options(first)["--mode"] == "full" and _options(two)["--engine"] == "fullgraph"
    assert _options(two, how) == _options(first, how), (first, two)


@pytest.mark.slow
def test_training_md_bf16_command_reaches_the_accuracy_beside_it(tmp_path):
    """docs/training.md's bf16 command, run as written on Cora: its test accuracy is the first
    (seed 0) of the two the text gives, within 0.01 (bf16 products differ between CPUs)."""
    import json

    text = (DOCS / "training.md").read_text()
    section = text[text.index("## Mixed precision (bf16)") :]
    cmd = next(c for c in _commands(section) if "train.autocast=bf16" in c)
    stated = float(re.search(r"test accuracy \((0\.\d+) and 0\.\d+", " ".join(section.split()))[1])
    cwd = tmp_path / "work"
    cwd.mkdir()
    prep = ["prepare", "planetoid", "--name", "cora", "--out", "data/cora"]
    assert _fleetgnn(prep, cwd) == 0
    argv = [*shlex.split(cmd)[1:], "--run-dir", "runs/bf16", "--quiet", "--set", "train.threads=1"]
    assert _fleetgnn(argv, cwd) == 0
    summary = json.loads((cwd / "runs" / "bf16" / "summary.json").read_text())
    assert summary["epochs"] == 200 and summary["config"]["train"]["autocast"] == "bf16"
    assert abs(summary["test_acc"] - stated) <= 0.01, (summary["test_acc"], stated)
