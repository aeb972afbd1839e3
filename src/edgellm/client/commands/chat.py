"""`edgellm chat`: a multi-turn terminal chat against the device daemon."""

from __future__ import annotations

import argparse
import sys
import uuid

import grpc

from edgellm.client.client import build_request
from edgellm.client.commands.common_args import (
    add_sampling,
    add_target,
    client_from,
    report_rpc_error,
    sampling_kwargs,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `chat` subcommand."""
    p = sub.add_parser("chat", help="multi-turn chat in the terminal (/reset, /quit)")
    add_target(p)
    add_sampling(p)
    p.add_argument("--system", default="You are a helpful assistant.", help="system message")
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Read lines from stdin, stream replies, keep the history."""
    history: list[tuple[str, str]] = [("system", ns.system)] if ns.system else []
    session = uuid.uuid4().hex
    with client_from(ns) as client:
        while True:
            if sys.stdin.isatty():
                sys.stdout.write("you> ")
                sys.stdout.flush()
            line = sys.stdin.readline()
            if not line:
                return 0
            text = line.strip()
            if text in ("/quit", "/exit"):
                return 0
            if text == "/reset":
                history = history[:1] if ns.system else []
                session = uuid.uuid4().hex
                continue
            if not text:
                continue
            history.append(("user", text))
            request = build_request(
                None,
                history,
                ns.max_new_tokens,
                ns.temperature,
                ns.seed,
                ns.stop,
                session,
                **sampling_kwargs(ns),
            )
            reply = ""
            sys.stdout.write("bot> ")
            try:
                for response in client.stream(request):
                    reply += response.text
                    sys.stdout.write(response.text)
                    sys.stdout.flush()
                    if response.finish_reason:
                        s = response.stats
                        sys.stdout.write("\n")
                        sys.stderr.write(
                            f"  [TTFT {s.ttft_ms:.0f} ms · {s.decode_tokens_per_second:.1f} tok/s]\n"
                        )
            except grpc.RpcError as err:
                history.pop()
                report_rpc_error(err)
                continue
            history.append(("assistant", reply))
