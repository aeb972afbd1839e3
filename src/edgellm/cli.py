"""The `edgellm` command: one entry point whose subcommands live in small modules."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from edgellm.common.errors import EdgeError
from edgellm.common.logs import configure_logging

# Each module exposes `register(subparsers)`; subcommand handlers import heavy deps lazily,
# so `edgellm generate` on a laptop never loads torch and `edgellm daemon` on a phone never needs it.
COMMAND_MODULES: tuple[str, ...] = (
    "edgellm.device.cli",
    "edgellm.host.convert.cli",
    "edgellm.client.commands.generate",
    "edgellm.client.commands.chat",
    "edgellm.client.commands.status",
    "edgellm.deploy.cli",
    "edgellm.client.commands.models",
    "edgellm.client.commands.simulate",
    "edgellm.client.commands.telemetry",
    "edgellm.client.commands.config",
    "edgellm.host.quantize.cli",
    "edgellm.host.evaluate.cli",
    "edgellm.host.scan.cli",
    "edgellm.host.host_cli",
)

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """Assemble the parser from every registered command module."""
    parser = argparse.ArgumentParser(prog="edgellm", description=__doc__)
    parser.add_argument(
        "--log-level", default=None, help="DEBUG, INFO, WARNING (default: $EDGELLM_LOG_LEVEL or INFO)"
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines even on a terminal")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, configure logs, run the chosen subcommand."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    configure_logging(ns.log_level, json=True if ns.log_json else None)
    handler: Handler = ns.handler
    try:
        return handler(ns)
    except KeyboardInterrupt:
        return 130
    except EdgeError as err:  # refused before any RPC: bad token file, pin mismatch, unsafe bind
        sys.stderr.write(f"edgellm: {err.code.name}: {err}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
