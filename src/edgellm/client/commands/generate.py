"""`edgellm generate PROMPT`: stream tokens from the daemon and print a one-line summary."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import grpc

from edgellm.client.client import DaemonClient, build_request, constrained, finish_reason_name
from edgellm.client.commands.common_args import add_sampling, add_target, report_rpc_error, sampling_kwargs
from edgellm.v1 import device_pb2


class BadConstraint(ValueError):
    """A constraint flag's file cannot be read or is not what the flag needs."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `generate` subcommand."""
    p = sub.add_parser("generate", help="stream a completion from the device daemon")
    add_target(p)
    add_sampling(p)
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message (chat template)")
    p.add_argument("--system", default=None, help="system message (implies --chat)")
    p.add_argument("--quiet-stats", action="store_true", help="don't print the summary line")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument(
        "--json-schema", metavar="FILE", type=Path, help="answer with JSON valid against this JSON Schema"
    )
    shape.add_argument("--json-object", action="store_true", help="answer with a JSON object")
    shape.add_argument("--regex", metavar="PATTERN", help="answer with text matching this regular expression")
    shape.add_argument(
        "--grammar", metavar="FILE", type=Path, help="answer in this Lark grammar (llguidance)"
    )
    p.add_argument("prompt", help="the prompt text")
    p.set_defaults(handler=run)


def constraint_from(ns: argparse.Namespace) -> device_pb2.OutputConstraint | None:
    """The OutputConstraint the flags ask for (None for free text); BadConstraint if a file is unusable."""
    if ns.json_object:
        return device_pb2.OutputConstraint(json_object=True)
    if ns.regex is not None:
        return device_pb2.OutputConstraint(regex=ns.regex)
    if ns.json_schema is None and ns.grammar is None:
        return None
    flag, path = (
        ("--json-schema", ns.json_schema) if ns.json_schema is not None else ("--grammar", ns.grammar)
    )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise BadConstraint(f"{flag} {path}: {err}") from err
    if ns.grammar is not None:
        return device_pb2.OutputConstraint(lark_grammar=text)
    try:
        json.loads(text)  # a typo is caught here; the daemon checks the schema itself
    except json.JSONDecodeError as err:
        raise BadConstraint(f"{flag} {path} is not valid JSON: {err}") from err
    return device_pb2.OutputConstraint(json_schema=text)


def run(ns: argparse.Namespace) -> int:
    """Stream one generation to stdout."""
    try:
        constraint = constraint_from(ns)
    except BadConstraint as err:
        sys.stderr.write(f"edgellm: {err}\n")
        return 2
    messages = None
    prompt: str | None = ns.prompt
    if ns.chat or ns.system:
        messages = ([("system", ns.system)] if ns.system else []) + [("user", ns.prompt)]
        prompt = None
    request = build_request(
        prompt,
        messages,
        ns.max_new_tokens,
        ns.temperature,
        ns.seed,
        ns.stop,
        "",
        **sampling_kwargs(ns),
    )
    request = constrained(request, constraint)
    out = sys.stdout
    try:
        with DaemonClient(ns.target) as client:
            start = time.perf_counter()
            first: float | None = None
            for response in client.stream(request):
                if response.text:
                    if first is None:
                        first = time.perf_counter() - start
                    out.write(response.text)
                    out.flush()
                if response.finish_reason:
                    out.write("\n")
                    if not ns.quiet_stats:
                        s = response.stats
                        sys.stderr.write(
                            f"[{finish_reason_name(response.finish_reason)}] "
                            f"TTFT {s.ttft_ms:.0f} ms (client {1000 * (first or 0):.0f} ms) · "
                            f"prefill {s.prompt_tokens} tok @ {s.prefill_tokens_per_second:.0f} tok/s · "
                            f"decode {s.completion_tokens} tok @ {s.decode_tokens_per_second:.1f} tok/s\n"
                        )
    except grpc.RpcError as err:
        return report_rpc_error(err)
    return 0
