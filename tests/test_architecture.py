"""The layer rules of DESIGN.md, checked on the source: a layer imports only layers below it, and
``nn``/``ops`` (single-device math) and ``cost`` (models) never import ``torch.distributed``."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "fleetgnn"
# bottom up; a package may import itself, the shared base modules, and anything listed before it
LAYERS = [
    "config",
    "graph",
    "partition",
    "distributed",
    "store",
    "sampling",
    "ops",
    "nn",
    "exchange",
    "cost",
    "engines",
    "train",
    "bench",  # the benchmark suite (`fleetgnn bench`): may use every layer below the CLI
    "cli",
]
BASE = {"errors", "types"}
SINGLE_DEVICE = {"nn", "ops", "cost"}  # cost: models only, never communicates


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _sources():
    return sorted(p for p in PKG.rglob("*.py") if p.relative_to(PKG).parts[0] in LAYERS)


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PKG)))
def test_layer_imports_only_layers_below(path):
    layer = path.relative_to(PKG).parts[0]
    allowed = set(LAYERS[: LAYERS.index(layer) + 1]) | BASE
    bad = []
    for line, name in _imports(path):
        parts = name.split(".")
        if parts[0] == "fleetgnn" and len(parts) > 1 and parts[1] not in allowed:
            if (PKG / parts[1]).exists() or (PKG / f"{parts[1]}.py").exists():
                bad.append(f"line {line}: {name}")
        if layer in SINGLE_DEVICE and (
            name == "torch.distributed" or name.startswith("torch.distributed.")
        ):
            bad.append(f"line {line}: {name} (nn/ops/cost never communicate)")
    assert not bad, f"{path.relative_to(PKG)} ({layer}) imports above its layer: {bad}"


def test_rule_bites_on_a_violation(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("from torch import distributed as dist\nimport torch.distributed\n")
    names = [n for _, n in _imports(bad)]
    assert "torch.distributed" in names


def test_ruff_lints_every_package_file():
    """No exclude list (ruff's defaults skip dirs such as dist/ and build/) hides package code."""
    import subprocess
    import sys

    pytest.importorskip("ruff")
    root = PKG.parent
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--show-files",
            "fleetgnn",
            "tests",
            "benchmarks",
            "examples",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    linted = {Path(line.strip()).resolve() for line in out.splitlines() if line.strip()}
    for top in ("fleetgnn", "tests", "benchmarks", "examples"):
        files = {p.resolve() for p in (root / top).rglob("*.py") if "results" not in p.parts}
        missing = sorted(str(p.relative_to(root)) for p in files - linted)
        assert not missing, f"ruff does not lint: {missing[:10]}"
