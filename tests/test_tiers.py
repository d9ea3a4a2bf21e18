"""The quick tier (``pytest -m 'not slow'``) stays quick: a test that starts worker processes is
marked ``slow``, unless it checks a refusal made before any process starts."""

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


def _is_slow(decorators: list[ast.expr]) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in decorators)


def test_tests_that_start_processes_are_marked_slow():
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_slow = any(
            isinstance(n, ast.Assign)
            and any(getattr(t, "id", None) == "pytestmark" for t in n.targets)
            and "mark.slow" in ast.unparse(n.value)
            for n in tree.body
        )
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            if module_slow or _is_slow(node.decorator_list) or node.name in QUICK_ANYWAY:
                continue
            if SPAWNS.search(ast.unparse(node)):
                unmarked.append(f"{path.relative_to(TESTS)}::{node.name}")
    assert not unmarked, f"start processes but are not marked @pytest.mark.slow: {unmarked}"
