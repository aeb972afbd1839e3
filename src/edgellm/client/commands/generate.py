"""`edgellm generate PROMPT`: stream tokens from the daemon and print a one-line summary."""

from __future__ import annotations

import argparse
import sys
import time

import grpc

from edgellm.client.client import build_request, finish_reason_name
from edgellm.client.commands.common_args import (
    add_sampling,
    add_target,
    client_from,
    report_rpc_error,
    sampling_kwargs,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `generate` subcommand."""
    p = sub.add_parser("generate", help="stream a completion from the device daemon")
    add_target(p)
    add_sampling(p)
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message (chat template)")
    p.add_argument("--system", default=None, help="system message (implies --chat)")
    p.add_argument("--quiet-stats", action="store_true", help="don't print the summary line")
    p.add_argument("prompt", help="the prompt text")
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Stream one generation to stdout."""
    messages = None
    prompt: str | None = ns.prompt
    if ns.chat or ns.system:
        messages = ([("system", ns.system)] if ns.system else []) + [("user", ns.prompt)]
        prompt = None
    request = build_request(
        prompt, messages, ns.max_new_tokens, ns.temperature, ns.seed, ns.stop, "", **sampling_kwargs(ns)
    )
    out = sys.stdout
    try:
        with client_from(ns) as client:
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
