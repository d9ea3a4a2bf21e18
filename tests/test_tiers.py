"""The quick tier (``pytest -m 'not slow'``) stays quick: a test that starts worker processes is
marked ``slow``, unless it checks a refusal made before any process starts.

A test starts processes when its own code does, or when a function of its module that it uses
does, however indirectly: a helper it calls, a callback it passes, or a fixture of the module it
takes as an argument (a small call graph within the file)."""

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# starting processes: a gloo world, the elastic launcher, torchrun, `--nproc N` runs, subprocesses
SPAWNS = re.compile(r"\brun_world\(|\blaunch\(|torchrun|\"--nproc\"|\bsubprocess\.|\bPopen\(")
#: fail before anything starts, or run one short subprocess (the README's own script included)
QUICK_ANYWAY = {
    "test_invalid_arguments_fail_before_spawning",
    "test_bad_world_size",
    "test_config_errors_are_refused_before_any_worker_starts",
    "test_resume_mismatch_refused_before_any_worker_starts",
    "test_nproc_with_a_single_process_engine_is_refused",
    "test_safe_unpickler_refuses_other_globals",
    "test_ruff_lints_every_package_file",
    "test_bad_input_is_one_line",
    "test_python_api_section_runs",
}

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _is_slow(decorators: list[ast.expr]) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in decorators)


def _uses(fn: _Function, names: set[str]) -> set[str]:
    """The module-level functions ``fn`` reaches in one step: names it loads (calls, callbacks)
    and its arguments named like one (pytest fixtures of the module)."""
    loaded = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    args = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    return (loaded | args) & names - {fn.name}


def unmarked_process_tests(source: str) -> list[str]:
    """Names of the tests in ``source`` that start processes, directly or through a function of
    the same module, and are neither marked ``slow`` nor known to be quick anyway."""
    tree = ast.parse(source)
    if any(
        isinstance(n, ast.Assign)
        and any(getattr(t, "id", None) == "pytestmark" for t in n.targets)
        and "mark.slow" in ast.unparse(n.value)
        for n in tree.body
    ):
        return []
    functions = {n.name: n for n in tree.body if isinstance(n, _Function)}
    spawning = {name for name, fn in functions.items() if SPAWNS.search(ast.unparse(fn))}
    calls = {name: _uses(fn, set(functions)) for name, fn in functions.items()}
    # close over the call graph: a function spawns when one it uses does
    changed = True
    while changed:
        grown = {name for name, used in calls.items() if used & spawning} - spawning
        spawning |= grown
        changed = bool(grown)
    return [
        name
        for name, fn in functions.items()
        if name.startswith("test_")
        and name in spawning
        and not _is_slow(fn.decorator_list)
        and name not in QUICK_ANYWAY
    ]


def test_tests_that_start_processes_are_marked_slow():
    unmarked = [
        f"{path.relative_to(TESTS)}::{name}"
        for path in sorted(TESTS.rglob("test_*.py"))
        for name in unmarked_process_tests(path.read_text())
    ]
    assert not unmarked, f"start processes but are not marked @pytest.mark.slow: {unmarked}"


PLANTED = """
import subprocess
import pytest

def _launch_cli(args):
    return subprocess.run(["fleetgnn", *args])

def _train(tmp):
    return _launch_cli(["train", str(tmp)])

def _pure(x):
    return x + 1

@pytest.fixture
def trained(tmp_path):
    return _train(tmp_path)

def test_via_two_helpers(tmp_path):
    assert _train(tmp_path).returncode == 0

def test_via_a_fixture(trained):
    assert trained.returncode == 0

def test_via_a_callback(tmp_path):
    assert list(map(_launch_cli, [["info"]]))

def test_quick():
    assert _pure(1) == 2

@pytest.mark.slow
def test_marked(tmp_path):
    assert _train(tmp_path).returncode == 0
"""


def test_check_follows_helpers_fixtures_and_callbacks():
    assert unmarked_process_tests(PLANTED) == [
        "test_via_two_helpers",
        "test_via_a_fixture",
        "test_via_a_callback",
    ]
    slow_module = "pytestmark = pytest.mark.slow\n" + PLANTED
    assert unmarked_process_tests(slow_module) == []
