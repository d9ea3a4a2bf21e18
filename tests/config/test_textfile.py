"""The bounded reader of every text input: regular files only, a size cap, UTF-8, YAML without
anchors, aliases or tags, depth and value-count limits, one line per refusal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetgnn.config import load_config, textfile
from fleetgnn.config.textfile import (
    MAX_YAML_DEPTH,
    load_json_file,
    load_yaml_file,
    parse_yaml,
    read_text,
)
from fleetgnn.errors import ConfigError, DatasetError

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9)}]\n" for p, k in zip("abcdefgh", "bcdefghi")
)


def _one_line(err: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 400, msg
    return msg


@pytest.mark.parametrize(
    "text, says",
    [
        (LAUGHS, "uses a YAML anchor '&a' at line 1"),
        ("train: {fanouts: *x}\n", "uses a YAML alias '*x'"),
        ("x: !!python/object/apply:os.system [ls]\n", "the YAML tag 'tag:yaml.org,2002:python"),
        ("x: !!binary aGk=\n", "tags are not allowed"),
        ("x: !foo 1\n", "tags are not allowed"),
        ("x: " + "[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1), "levels deep"),
        ("x: " + "[" * 100_000, "levels deep"),  # refused before the parser reaches the end
        ("[" + "0," * 1000 + "0]", "more than 1000 values"),
        ("train: [unclosed\n", "is not valid YAML (expected ',' or ']'"),
    ],
    ids=[
        "alias-bomb",
        "alias",
        "python-tag",
        "binary-tag",
        "local-tag",
        "deep",
        "unclosed-deep",
        "many",
        "invalid",
    ],
)
def test_hostile_yaml_is_one_line(text, says, monkeypatch):
    monkeypatch.setattr(textfile, "MAX_YAML_NODES", 1000)  # the real bound, 100k, takes seconds
    with pytest.raises(ConfigError) as e:
        parse_yaml(text, "config file 'c.yaml'")
    assert says in _one_line(e)
    assert _one_line(e).startswith("config file 'c.yaml' ")


def test_plain_yaml_still_parses():
    assert parse_yaml("train: {fanouts: [5, 10], lr: 0.01, name: 'a&b *c'}\n", "x") == {
        "train": {"fanouts": [5, 10], "lr": 0.01, "name": "a&b *c"}
    }
    assert parse_yaml("[1, 2", "x", invalid_as_text=True) == "[1, 2"  # a --set string
    with pytest.raises(ConfigError, match="anchor"):  # bounds hold for --set values too
        parse_yaml("[&a 1, *a", "x", invalid_as_text=True)


def test_set_values_are_bounded():
    with pytest.raises(ConfigError, match=r"--set train.fanouts uses a YAML anchor"):
        load_config(overrides=["train.fanouts=[&a 5, *a]"])
    with pytest.raises(ConfigError, match=r"--set train.fanouts uses a YAML anchor"):
        load_config(overrides=["train.fanouts=&a 5,*a"])  # the a,b,c form parses each part
    with pytest.raises(ConfigError, match=r"--set data.dataset uses the YAML tag"):
        load_config(overrides=["data.dataset=!!python/name:os.system"])
    with pytest.raises(ConfigError, match=r"--set data.dataset is not UTF-8"):
        load_config(overrides=["data.dataset=" + b"\xff".decode("utf-8", "surrogateescape")])


def test_only_regular_files_are_read(tmp_path: Path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    cases = {
        fifo: "is a FIFO (named pipe), not a regular file",
        zero: "is a character device, not a regular file",
        tmp_path: "is a directory, not a regular file",
        tmp_path / "missing.yaml": "cannot be read (No such file or directory)",
    }
    for path, says in cases.items():
        with pytest.raises(ConfigError) as e:
            load_yaml_file(path, "config file", fix="check the path")
        assert says in _one_line(e) and _one_line(e).endswith("; check the path")
    with pytest.raises(DatasetError, match="is a FIFO"):
        load_json_file(fifo, "split file", max_bytes=100, error=DatasetError)


def test_size_cap_and_utf8(tmp_path: Path):
    big = tmp_path / "big.yaml"
    big.write_text("x: 1\n" * 100)
    with pytest.raises(ConfigError, match=r"is 500 bytes, more than the 499 bytes it may have"):
        read_text(big, "config file", max_bytes=499)
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"x: \xff\n")
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte b'\\xff' at offset 3\)"):
        load_yaml_file(bad, "config file")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nests too deeply"):
        load_json_file(deep, "plan", max_bytes=1 << 20)
