"""The `edgellm` command: one entry point whose subcommands live in small modules."""

from __future__ import annotations

import argparse
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


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose own --help page starts with the one-line help shown in the list."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"])
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        return parser


class Parser(argparse.ArgumentParser):
    """Every (sub)command parser: defaults in the help, and subcommands of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)


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
