"""Command-line options shared by subcommands that read a run config (``train``, ``plan``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_config_options(p: argparse.ArgumentParser, set_example: str) -> None:
    """``--config FILE`` and the repeatable ``--set KEY=VALUE`` (into ``args.overrides``)."""
    p.add_argument("--config", type=Path, default=None, help="YAML config file")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a config key, e.g. --set {set_example} (repeatable)",
    )
