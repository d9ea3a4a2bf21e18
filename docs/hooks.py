"""MkDocs hook: the generated reference pages, written from the code at build time.

``<!-- generated: cli -->`` becomes the ``--help`` of every ``fleetgnn`` command (and of each
``prepare`` format), ``<!-- generated: config-keys -->`` the table of every config key of
``fleetgnn train`` with its type and default (what ``fleetgnn train --list-keys`` prints), so
neither page can drift from the parser and the config dataclasses.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import yaml

MARKERS = ("<!-- generated: cli -->", "<!-- generated: config-keys -->")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_help() -> str:
    """Markdown: one section per command with its ``--help`` text."""
    from fleetgnn.cli.main import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: make it fixed
    root = build_parser()
    out = ["## fleetgnn", "", "```text", root.format_help().rstrip(), "```", ""]
    for name, parser in _subparsers(root).items():
        out += [f"## fleetgnn {name}", "", "```text", parser.format_help().rstrip(), "```", ""]
        for sub, inner in _subparsers(parser).items():
            out += [f"### fleetgnn {name} {sub}", "", "```text", inner.format_help().rstrip()]
            out += ["```", ""]
    return "\n".join(out)


def _cell(value: Any) -> str:
    shown = yaml.safe_dump(value, default_flow_style=True).strip()
    return shown.removesuffix("\n...").removesuffix("...").strip().replace("|", "\\|")


def config_keys() -> str:
    """Markdown: the table of every config key, its type, default, allowed values and help."""
    from fleetgnn.config.run import config_keys as keys

    def cell(text: str) -> str:
        return " ".join(str(text).split()).replace("|", "\\|")

    rows = ["| key | type | default | help |", "|---|---|---|---|"]
    for k in keys():
        allowed = f" One of: {', '.join(map(str, k.choices))}." if k.choices else ""
        rows.append(
            f"| `{k.key}` | `{cell(k.type)}` | `{_cell(k.default)}` | {cell(k.help)}{allowed} |"
        )
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the markers of a page with the text generated from the code."""
    if MARKERS[0] in markdown:
        markdown = markdown.replace(MARKERS[0], cli_help())
    if MARKERS[1] in markdown:
        markdown = markdown.replace(MARKERS[1], config_keys())
    return markdown
