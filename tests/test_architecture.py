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
    "tasks",  # node classification, link prediction: losses, metric sums (single-device)
    "engines",
    "train",
    "bench",  # the benchmark suite (`fleetgnn bench`): may use every layer below the CLI
    "cli",
]
BASE = {"durable", "errors", "keyhash", "kernels", "types"}
SINGLE_DEVICE = {"nn", "ops", "cost", "tasks"}  # cost: models only; tasks: sums, not reductions


def _imports(path: Path, package: str = "") -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``path``, at any depth (function-level too).

    ``from X import a`` gives ``X`` and ``X.a``; a relative import is resolved against
    ``package`` (the importing module's package, e.g. ``fleetgnn.cost``).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _imports_from_module(node, package)
            if module:
                out.append((node.lineno, module))
                out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return out


def layer_violations(path: Path, pkg: Path = PKG) -> list[str]:
    """The imports of ``path`` (a module of the package at ``pkg``) that break the layer rules."""
    layer = path.relative_to(pkg).parts[0]
    allowed = set(LAYERS[: LAYERS.index(layer) + 1]) | BASE
    bad = []
    for line, name in _imports(path):
        parts = name.split(".")
        if parts[0] == "fleetgnn" and len(parts) > 1 and parts[1] not in allowed:
            if (pkg / parts[1]).exists() or (pkg / f"{parts[1]}.py").exists():
                bad.append(f"line {line}: {name}")
        if layer in SINGLE_DEVICE and (
            name == "torch.distributed" or name.startswith("torch.distributed.")
        ):
            bad.append(f"line {line}: {name} (nn/ops/cost never communicate)")
    return bad


def _sources(pkg: Path = PKG) -> list[Path]:
    return sorted(p for p in pkg.rglob("*.py") if p.relative_to(pkg).parts[0] in LAYERS)


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PKG)))
def test_layer_imports_only_layers_below(path):
    bad = layer_violations(path)
    layer = path.relative_to(PKG).parts[0]
    assert not bad, f"{path.relative_to(PKG)} ({layer}) imports above its layer: {bad}"


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package tree named ``fleetgnn`` under ``tmp_path`` holding ``files``."""
    pkg = tmp_path / "fleetgnn"
    for layer in LAYERS:
        (pkg / layer).mkdir(parents=True, exist_ok=True)
        (pkg / layer / "__init__.py").write_text("")
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    return pkg


def test_rule_bites_on_a_violation(tmp_path):
    """The rule itself, run on planted modules: a layer importing above it, math code importing
    ``torch.distributed`` (in a function body too), and a clean module."""
    pkg = _plant(
        tmp_path,
        {
            "nn/up.py": "from fleetgnn.engines import build_engine\n",
            "ops/comm.py": "def f():\n    from torch import distributed\n    import torch\n",
            "engines/ok.py": "from fleetgnn.nn import GNN\nimport torch.distributed as dist\n",
        },
    )
    assert layer_violations(pkg / "nn" / "up.py", pkg) == [
        "line 1: fleetgnn.engines",
        "line 1: fleetgnn.engines.build_engine",
    ]
    assert layer_violations(pkg / "ops" / "comm.py", pkg) == [
        "line 2: torch.distributed (nn/ops/cost never communicate)"
    ]
    assert layer_violations(pkg / "engines" / "ok.py", pkg) == []


def _imports_from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` statement reads from."""
    module = node.module or ""
    if not node.level:
        return module
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{module}" if module else base


def import_cycles(pkg: Path = PKG) -> list[list[str]]:
    """Groups of modules of the package at ``pkg`` that import each other in a circle.

    Every import counts, module-level or inside a function (a local import hides a cycle, it does
    not remove it). ``from package import submodule`` is an edge to the submodule only; an
    imported name that is not a submodule is an edge to the module that defines or re-exports it.
    Strongly connected components (Tarjan) of more than one module, each sorted.
    """
    mods: dict[str, Path] = {}
    for p in pkg.rglob("*.py"):
        parts = p.relative_to(pkg.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        package = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                targets = [owner(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _imports_from_module(node, package)
                # `from a.b import c`: the submodule a.b.c if there is one, else a.b (or above)
                targets = [owner(f"{base}.{a.name}") for a in node.names] if base else []
            else:
                continue
            edges[m] |= {t for t in targets if t and t != m and t.split(".")[0] == pkg.name}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(groups)


def test_no_import_cycles():
    assert import_cycles() == []


def test_cycle_check_bites_on_a_planted_cycle(tmp_path):
    pkg = _plant(
        tmp_path,
        {
            "cli/a.py": "from fleetgnn.cli.b import f\n",
            "cli/b.py": "def f():\n    from fleetgnn.cli import a  # a local import hides it\n",
            "cost/x.py": "from fleetgnn.cost import y\n",  # a submodule: no edge to cost
            "cost/y.py": "import fleetgnn.graph\n",
        },
    )
    assert import_cycles(pkg) == [["fleetgnn.cli.a", "fleetgnn.cli.b"]]


#: Most lines a module of the package may have: a module holds one concept (issue 24, part 4).
#: Chosen from the sizes after the split (largest: cost/store_model.py, 947 lines).
MAX_MODULE_LINES = 1000
#: Modules allowed past the cap, each with its reason (none).
LONG_MODULES: dict[str, str] = {}


def long_modules(pkg: Path = PKG, cap: int = MAX_MODULE_LINES) -> list[str]:
    """``"path: N lines"`` of every module under ``pkg`` longer than ``cap`` and not allowed."""
    out = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        n = len(path.read_text().splitlines())
        if n > cap and rel not in LONG_MODULES:
            out.append(f"{rel}: {n} lines")
    return out


def test_no_module_exceeds_the_line_cap():
    """A module past the cap holds several concepts: split it (or add it, with a reason, to
    LONG_MODULES)."""
    assert long_modules() == []


def test_line_cap_bites_on_a_planted_long_module(tmp_path):
    pkg = _plant(
        tmp_path,
        {
            "store/big.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
            "store/edge.py": "x = 1\n" * MAX_MODULE_LINES,
        },
    )
    assert long_modules(pkg) == [f"store/big.py: {MAX_MODULE_LINES + 1} lines"]


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
