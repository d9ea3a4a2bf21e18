"""Every synthetic preset writes, for one seed, the bytes it always wrote.

``fleetgnn prepare synthetic --preset P`` at a small scale, each dataset's arrays and
``meta.json`` digested: a change to a generator that moves any number shows up here (a change
meant to move them bumps the generator's version and these digests together).
"""

import hashlib
import json
from pathlib import Path

import pytest

from fleetgnn.cli.main import main


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.glob("**/*.npy")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    meta = json.loads((root / "meta.json").read_text())
    h.update(json.dumps(meta, sort_keys=True).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize(
    ("preset", "scale", "extra", "digest"),
    [
        ("tiny", "0.3", [], "80e1bd1010fd8b03"),
        ("tiny", "0.3", ["--edge-features", "2"], "78fd9736c89f2a16"),
        ("small", "0.05", [], "d9959c19eebfbe73"),
        ("products-like", "0.0005", [], "34129ffcbcd62f80"),
        ("papers-like", "0.00001", [], "220d5b01b4e0613a"),
        ("temporal-like", "0.002", [], "c5c32e0184319024"),
        ("mag-like", "0.001", [], "53221640a8b89826"),
        ("igbh-like", "0.005", [], "bdb29baf7a73d1f7"),
        ("mag-temporal-like", "0.001", [], "7c2d3943067ce283"),
    ],
)
def test_preset_writes_what_it_always_wrote(tmp_path, preset, scale, extra, digest):
    out = tmp_path / preset
    argv = ["prepare", "synthetic", "--preset", preset, "--scale", scale, "--seed", "3"]
    assert main([*argv, *extra, "--out", str(out)]) == 0
    assert _digest(out) == digest
