"""The README's commands and claims: the Python API script (docs/python-api.md) runs as written
(on real Cora, paths and epochs shortened), the Quick start reaches the accuracy it states, links
resolve. The docs' other commands: tests/test_docs.py."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetgnn.graph import write_dataset
from fleetgnn.graph.loaders.bundled import DATA_DIR
from fleetgnn.graph.loaders.planetoid import load_planetoid

ROOT = Path(__file__).resolve().parents[1]
PLANETOID = DATA_DIR / "planetoid"  # the Cora that ships with fleetgnn


def test_python_api_section_runs(tmp_path):
    text = (ROOT / "docs" / "python-api.md").read_text()
    section = text[text.index("# Python API") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    data = write_dataset(load_planetoid(PLANETOID, "cora"), tmp_path / "cora")
    assert '"data/cora"' in code and '"runs/mine"' in code and "epochs=30" in code
    code = code.replace('"data/cora"', repr(str(data))).replace("epochs=30", "epochs=2")
    assert '"preds/mine"' in code and "model=model" in code
    code += 'print(repr(summary["final_train_loss"]))\n'
    outputs = []
    for n in (1, 2):  # twice: the same numbers (the initial weights are seeded)
        run = tmp_path / f"run{n}"
        text = code.replace('"runs/mine"', repr(str(run)))
        text = text.replace('"preds/mine"', repr(str(tmp_path / f"preds{n}")))
        script = tmp_path / "api.py"
        script.write_text(text)
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.strip().splitlines()
        assert 0.0 <= float(lines[-2]) <= 1.0
        assert (run / "summary.json").is_file()
        outputs.append(lines[-2:])
    assert outputs[0] == outputs[1]
    import numpy as np

    first, second = (np.load(tmp_path / f"preds{n}" / "predictions.npy") for n in (1, 2))
    assert first.shape == (2708,) and (first == second).all()


def test_every_link_resolves_in_the_repository():
    """Relative links name files of the repository and anchors name headings; nothing points
    outside it (the README once ended with a DESIGN.md that a clone did not have)."""
    text = (ROOT / "README.md").read_text()
    slugs = {
        re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.*)$", text, re.M)
    }
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for target in links:
        if target.startswith(("http://", "https://")):
            continue
        if target.startswith("#"):
            assert target[1:] in slugs, target
        else:
            assert (ROOT / target.split("#")[0]).exists(), target
    assert "../shared" not in text and "DESIGN.md" not in text


def test_bundled_cora_is_package_data():
    """Every bundled file is declared in pyproject.toml, so a wheel (not only a clone) has it."""
    import fnmatch

    from fleetgnn.graph.loaders.bundled import DATA_DIR, npz_file, planetoid_root

    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    globs = re.findall(r'"([^"]+)"', re.search(r"^fleetgnn = \[(.*?)\]", section, re.M | re.S)[1])
    files = [p.relative_to(DATA_DIR.parent).as_posix() for p in DATA_DIR.rglob("*") if p.is_file()]
    assert len(files) == 10, files  # 8 Planetoid parts, cora.npz, README.md
    for f in files:
        assert any(fnmatch.fnmatch(f, g) for g in globs), f
    assert (planetoid_root("cora") / "ind.cora.graph").is_file() and npz_file("cora").is_file()
    readme = (DATA_DIR / "README.md").read_text()
    assert "kimiyoung/planetoid" in readme and "shchur/gnn-benchmark" in readme
    assert readme.count("MIT") >= 2


def _bash_blocks(text):
    return re.findall(r"```bash\n(.*?)```", text, re.S)


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_install_is_one_labelled_line_for_cpu_and_one_for_gpu_machines(page):
    """The Quick start's first two blocks are one labelled line each, install + train: the
    CPU-only machine's first (PyTorch's CPU index, so a laptop does not fetch the CUDA build),
    then the GPU machine's (PyPI's default wheel); each its own block, so copying one never runs
    the other. The next command installs the test extras and runs what CI runs; the quick tier
    follows. Both pin the torch that CI installs."""
    text = (ROOT / page).read_text()
    start = text.index("## Quick start") if page == "README.md" else 0
    end = text.find("\n## ", start + 1)
    quick = text[start : end if end > 0 else len(text)]
    blocks = _bash_blocks(quick)
    ci = (ROOT / ".ci" / "run").read_text()
    pin = re.search(r"pip install -q (torch==\S+)", ci)[1]
    cpu, gpu = (block.strip().splitlines() for block in blocks[:2])
    assert (
        len(cpu) == len(gpu) == 2 and cpu[0].startswith("# CPU-only") and gpu[0].startswith("# GPU")
    )
    index = "--index-url https://download.pytorch.org/whl/cpu"
    assert cpu[1] == f"pip install {pin} {index} && pip install -e . && fleetgnn train"
    assert gpu[1] == f"pip install {pin} && pip install -e . && fleetgnn train"
    assert blocks[2].strip() == "pip install -e '.[dev]' && python -m pytest -q"
    assert "python -m pytest -q" in ci
    assert "python -m pytest -q -m 'not slow'\n" in blocks  # the quick tier
    # no other install of torch in the Quick start, and no suite figures to go stale
    assert sum("pip install torch" in b for b in blocks) == 2
    assert not re.search(r"\d+ (minutes|tests)|\d+ s\b", quick), "suite figures drift: drop them"


def test_report_is_introduced_with_the_extra_it_needs():
    """Where `fleetgnn report` first appears, in the README and on each docs page, its paragraph
    says it needs the `[plot]` extra (matplotlib), before a reader meets the command's error."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    seen = 0
    for page in pages:
        text = page.read_text()
        at = text.find("fleetgnn report")
        if at < 0:
            continue
        seen += 1
        start, end = text.rfind("\n\n", 0, at), text.find("\n\n", at)
        assert "[plot]" in text[start : end if end > 0 else len(text)], page.name
    assert seen >= 3


@pytest.mark.slow
def test_quick_start_reaches_the_accuracy_the_readme_states(tmp_path, monkeypatch):
    """`fleetgnn train` with no arguments: the first epoch's and the best test accuracy, the
    epochs and the default dataset's classes are the numbers the Quick start states (read from
    the README, so the two cannot drift apart; docs/getting-started.md must state the README's,
    tests/test_docs_numbers.py)."""
    from fleetgnn.cli.main import main
    from fleetgnn.train import read_metrics

    text = " ".join((ROOT / "README.md").read_text().split())
    stated = r"climbs from (0\.\d+) to ~(0\.\d+) test accuracy over the (\d+) epochs, (\d+) "
    stated += "classes"
    claim = re.search(stated, text)
    assert claim, "the Quick start no longer states its accuracy"
    first, best, epochs = float(claim[1]), float(claim[2]), int(claim[3])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # generated as on first use
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--quiet"]) == 0
    records = [r for r in read_metrics(run / "metrics.jsonl") if "epoch" in r]
    assert len(records) == epochs
    assert abs(records[0]["test_acc"] - first) <= 0.03, records[0]
    assert abs(max(r["test_acc"] for r in records) - best) <= 0.03, records
    (meta,) = (tmp_path / "cache").rglob("meta.json")  # the default dataset, generated above
    assert json.loads(meta.read_text())["num_classes"] == int(claim[4])
