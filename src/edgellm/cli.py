"""The `edgellm` command: one entry point whose subcommands live in small modules."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from edgellm import __version__
from edgellm.common.logs import configure_logging

# Each module exposes `register(subparsers)`; subcommand handlers import heavy deps lazily,
# so `edgellm generate` on a laptop never loads torch and `edgellm daemon` on a phone never needs it.
COMMAND_MODULES: tuple[str, ...] = (
    "edgellm.platforms",  # `edgellm daemon` (edgellm.device.cli), on the platform chosen there
    "edgellm.host.convert.cli",
    "edgellm.client.commands.generate",
    "edgellm.client.commands.chat",
    "edgellm.client.commands.status",
    "edgellm.deploy.cli",
    "edgellm.client.commands.models",
    "edgellm.sim.cli",
    "edgellm.client.commands.telemetry",
    "edgellm.client.commands.config",
    "edgellm.gateway.cli",
    "edgellm.host.quantize.cli",
    "edgellm.host.evaluate.cli",
    "edgellm.host.scan.cli",
    "edgellm.host.host_cli",
    "edgellm.client.commands.jobs",
    "edgellm.client.commands.token",
    "edgellm.client.commands.fleet",
)

Handler = Callable[[argparse.Namespace], int]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless it is empty or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        # Identity, not ==: 0 and 0.0 equal False but are defaults worth showing.
        empty = default is None or default is False or default is argparse.SUPPRESS or default in ("", [])
        if "(default" in text or empty:
            return text
        return super()._get_help_string(action)


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """' (did you mean X?)' for the closest of CHOICES, or '' when none is close (difflib)."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose own --help page starts with the one-line help shown in the list.

    An argument the chosen subcommand does not know is reported by that subcommand (its usage,
    and the option it was probably meant to be): argparse hands unknown arguments up to the
    top-level parser, whose usage (`edgellm [-h] ... COMMAND`) says nothing about `status --jsno`.
    """

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"])
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        return parser

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, values, option_string)
        extras: list[str] = getattr(namespace, argparse._UNRECOGNIZED_ARGS_ATTR, None) or []
        if extras:
            chosen = self._name_parser_map[values[0]]
            options = [o for o in chosen._option_string_actions if o.startswith("--")]
            hint = did_you_mean(extras[0], options) if extras[0].startswith("-") else ""
            chosen.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


class Parser(argparse.ArgumentParser):
    """Every (sub)command parser: defaults in the help, and subcommands of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's choice check, plus the closest choice (Python 3.12's suggest_on_error; we run 3.11)."""
        choices = action.choices
        if choices is not None and value not in choices:
            names = [str(c) for c in choices]
            hint = did_you_mean(str(value), names)
            listed = ", ".join(repr(c) for c in choices)
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from {listed})")


def build_parser() -> argparse.ArgumentParser:
    """Assemble the parser from every registered command module."""
    parser = Parser(prog="edgellm", description=__doc__)
    parser.add_argument("--version", action="version", version=f"edgellm {__version__}")
    parser.add_argument(
        "--log-level", default=None, help="DEBUG, INFO, WARNING (default: $EDGELLM_LOG_LEVEL or INFO)"
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines even on a terminal")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, configure logs, run the chosen subcommand; map user errors to messages."""
    from edgellm.client.failures import INTERRUPTED, failure_for, peer_of

    parser = build_parser()
    ns = parser.parse_args(argv)
    configure_logging(ns.log_level, json=True if ns.log_json else None)
    handler: Handler = ns.handler
    try:
        return handler(ns)
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as exc:
        failure = failure_for(exc, peer_of(ns))
        if failure is None:
            raise  # a bug: keep the traceback
        if (ns.log_level or os.environ.get("EDGELLM_LOG_LEVEL", "")).upper() == "DEBUG":
            traceback.print_exc()
        words = (ns.command, getattr(ns, "verb", None), getattr(ns, "action", None))
        sys.stderr.write(f"edgellm {' '.join(w for w in words if w)}: {failure.message}\n")
        return failure.exit_code


if __name__ == "__main__":
    sys.exit(main())
