"""Command-line plumbing shared by the subcommands: the parser class, help, config options.

Every parser of the ``fleetgnn`` command is a :class:`Parser`: its help shows each option's
default (:class:`HelpFormatter`; options whose default means "decided later" say so in their own
words), an invalid choice names the nearest valid one (``--model gnc``: did you mean 'gcn'?), and
a parse error is one line, without argparse's usage block.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from fleetgnn.config.suggest import nearest


class HelpFormatter(argparse.HelpFormatter):
    """``(default: X)`` after every option's help; texts with line breaks kept as written.

    A description, epilog or group text with line breaks of its own (tables, examples) is kept
    as written; one without is wrapped.

    An option whose help already speaks of its default, a flag (``store_true``), a positional
    argument and an option without a default (``None``: its help says what happens then) are
    left as written.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "default" in text
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or default == []
        ):
            return action.help
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser``: :class:`HelpFormatter`, "did you mean", one-line parse errors.

    Its subparsers are of this class too (argparse's default ``parser_class``), so subcommand
    names get the suggestion as well (``fleetgnn trian``: did you mean 'train'?).

    An ``epilog`` may be a function returning the text: it is called only when the help is
    shown, so a parser whose epilog lists things from a heavy module (the cost package imports
    torch) is built without importing it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        """The help text, with a function epilog replaced by its text first."""
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        """Exit 2 with one line: the error, then where the usage is (not the usage itself).

        argparse prints its usage block (a dozen lines for ``train``) before the error line,
        which pushed the one line that helps (the bad value and the nearest valid one) below it.
        """
        self.exit(2, f"{self.prog}: error: {message} (usage: {self.prog} -h)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        choices = [str(c) for c in action.choices]
        msg = f"invalid choice: {value!r} (choose from {', '.join(choices)})"
        guess = nearest(value, choices)
        if guess is not None:
            msg += f"; did you mean {guess!r}?"
        raise argparse.ArgumentError(action, msg)


class _ListKeys(argparse.Action):
    """``--list-keys``: print every config key with its default, type and help, then exit 0.

    Derived from the knob classes that declare the keys (:func:`fleetgnn.config.run.config_keys`).
    """

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        import textwrap

        import yaml

        from fleetgnn.config.run import MODEL_DEFAULTS, config_keys

        rows = config_keys()
        width = max(len(r.key) for r in rows)
        out = [
            "config keys: set with --set KEY=VALUE or in a --config YAML file (one mapping per "
            "section, e.g. 'train:' then '  epochs: 200'); null means decided at run time, and "
            "config.yaml records the value used",
        ]
        for row in rows:
            shown = yaml.safe_dump(row.default, default_flow_style=True).strip()
            shown = shown.removesuffix("\n...").removesuffix("...").strip()
            tp = row.type
            if row.choices:
                tp += ": " + ", ".join("null" if c is None else str(c) for c in row.choices)
            out.append(f"  {row.key:<{width}}  {shown:<10} {tp}")
            out.extend(
                textwrap.wrap(row.help, 96, initial_indent=" " * 6, subsequent_indent=" " * 6)
            )
        per_model = ", ".join(
            f"{m} {d.get('hidden_dim')}" for m, d in MODEL_DEFAULTS.items() if "hidden_dim" in d
        )
        out.append(f"model.hidden null: the model's own default ({per_model})")
        sys.stdout.write("\n".join(out) + "\n")
        parser.exit(0)


#: What ``--config`` reads, shown in ``fleetgnn train --help``.
CONFIG_EXAMPLE = """\
a --config file is YAML, one mapping per section (keys as in --list-keys):
  data:
    dataset: data/cora
  model:
    name: gcn
    hidden: 16
  optim:
    lr: 0.01
  train:
    mode: full
    epochs: 200
"""


def add_config_options(p: argparse.ArgumentParser, set_example: str) -> None:
    """``--config FILE``, ``--set KEY=VALUE`` (repeatable, into ``args.overrides``), --list-keys."""
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML config file, one mapping per section (data, model, optim, train, store, "
        "fullgraph, split, offload); default: none, every key at its default",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a config key, e.g. --set {set_example} (repeatable; the keys and their "
        "defaults: --list-keys)",
    )
    p.add_argument(
        "--list-keys",
        action=_ListKeys,
        help="list every config key with its default and type, then exit",
    )
