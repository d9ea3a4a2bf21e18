"""The README's Python API script runs as written (on real Cora, paths and epochs shortened)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetgnn.graph import write_dataset
from fleetgnn.graph.loaders.planetoid import load_planetoid

ROOT = Path(__file__).resolve().parents[1]
PLANETOID = ROOT.parent / "shared" / "datasets" / "planetoid"


@pytest.mark.skipif(not (PLANETOID / "ind.cora.x").is_file(), reason="no shared Cora")
def test_python_api_section_runs(tmp_path):
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python API") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    data = write_dataset(load_planetoid(PLANETOID, "cora"), tmp_path / "cora")
    assert '"data/cora"' in code and '"runs/mine"' in code and "epochs=30" in code
    code = code.replace('"data/cora"', repr(str(data))).replace("epochs=30", "epochs=2")
    code = code.replace('"runs/mine"', repr(str(tmp_path / "run")))
    script = tmp_path / "api.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert 0.0 <= float(done.stdout.strip().splitlines()[-1]) <= 1.0
    assert (tmp_path / "run" / "summary.json").is_file()
