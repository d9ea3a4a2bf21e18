"""Issue 30, findings 1 and 2: hostile text inputs end in one line, fast and small.

Each case runs ``fleetgnn`` in a fresh process and measures its exit status, its stderr, its wall
time and its peak resident memory (``wait4``): a YAML alias bomb (346 bytes that grew past 3.9 GB)
via ``--config`` (and, in this process, via ``--set``), a ``store.topology`` file that is a link
to ``/dev/zero`` (read until memory ran out), and a config that is a FIFO (which hung forever).
The old failures reached gigabytes; a refusal now needs no torch (see ``MAX_RSS``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from fleetgnn.cli.main import main
from fleetgnn.cli.messages import one_line
from fleetgnn.graph import write_dataset
from fleetgnn.graph.synthetic import generate_graph, spec_for

ROOT = Path(__file__).resolve().parents[1]
LAUGHS = "data:\n  dataset: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"  {k}: &{k} [{', '.join([f'*{p}'] * 9)}]\n" for p, k in zip("abcdefgh", "bcdefghi")
)
#: Seconds and resident bytes a refusal may take. The issue asks for 5 s and 300 MB; the time
#: bound is 10 s for a loaded machine. A refusal runs no torch: the parser, the config and the
#: topology file are read and checked before torch is imported (torch alone is ~250 MB).
MAX_SECONDS, MAX_RSS = 10.0, 300_000_000


#: Runs ``python -m fleetgnn ARGS`` and prints its peak RSS in KiB. A child started straight from
#: pytest would report pytest's own RSS as its peak (``vfork`` + ``exec`` keep the parent's
#: high-water mark), so the measured process is the child of this small wrapper instead.
_MEASURE = """
import os, subprocess, sys
p = subprocess.Popen([sys.executable, "-m", "fleetgnn", *sys.argv[1:]], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(p.pid, 0)
print(usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _fleetgnn(args: list[str], cwd: Path) -> tuple[int, list[str], float, int]:
    """``(exit status, stderr lines, seconds, peak RSS bytes)`` of ``fleetgnn ARGS``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", _MEASURE, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,  # a hang is killed with its child
        )
        timer = threading.Timer(3 * MAX_SECONDS, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
        seconds = time.monotonic() - start
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").strip().splitlines()
        out.seek(0)
        kib = out.read().decode().strip()
    return proc.returncode, lines, seconds, int(kib or 0) * 1024


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(
        generate_graph(spec_for("tiny", 0.3), seed=1), tmp_path_factory.mktemp("d") / "tiny"
    )


def _cases(tmp: Path, tiny: Path) -> dict[str, tuple[list[str], str]]:
    bomb = tmp / "laughs.yaml"
    bomb.write_text(LAUGHS)
    fifo = tmp / "fifo.yaml"
    os.mkfifo(fifo)
    zero = tmp / "zero.yaml"
    zero.symlink_to("/dev/zero")
    inline = (
        "[&a [lol,lol,lol,lol,lol,lol,lol,lol,lol], "
        + ", ".join(f"&{k} [{','.join([f'*{p}'] * 9)}]" for p, k in zip("abcdefgh", "bcdefghi"))
        + "]"
    )
    run = ["train", "--dataset", str(tiny), "--epochs", "1", "--quiet", "--run-dir", str(tmp / "r")]
    return {
        "alias-bomb-config": (
            [*run, "--config", str(bomb)],
            f"config file '{bomb}' uses a YAML anchor '&a' at line 2",
        ),
        "alias-bomb-set": ([*run, "--set", f"train.fanouts={inline}"], "--set train.fanouts uses"),
        "dev-zero-topology": (
            [*run, "--engine", "minibatch", "--nproc", "2", "--set", f"store.topology={zero}"],
            f"'store.topology' file '{zero}' is a character device, not a regular file",
        ),
        "fifo-config": (
            [*run, "--config", str(fifo)],
            f"config file '{fifo}' is a FIFO (named pipe), not a regular file",
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", ["alias-bomb-config", "dev-zero-topology", "fifo-config"])
def test_hostile_input_is_one_line_fast_and_small(case, tiny, tmp_path):
    argv, says = _cases(tmp_path, tiny)[case]
    rc, err, seconds, rss = _fleetgnn(argv, tmp_path)
    assert rc == 2, (rc, err)
    assert len(err) == 1 and err[0].startswith("fleetgnn train: error: "), err
    assert says in err[0], err
    assert seconds < MAX_SECONDS and rss < MAX_RSS, (seconds, rss >> 20)
    assert not (tmp_path / "r").exists()  # refused before the run directory was made


def test_alias_bomb_in_set_is_one_line(tiny, tmp_path, capsys):
    """The same bomb as a ``--set`` value (in this process: the bound is the loader's)."""
    argv, says = _cases(tmp_path, tiny)["alias-bomb-set"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_error_lines_are_one_line_and_bounded():
    assert one_line("a\n  b\tc") == "a b c"
    long = one_line("x" * 10_000)
    assert len(long) < 2100 and "[8000 characters cut]" in long
