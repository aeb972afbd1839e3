"""`edgellm chat`: a multi-turn terminal chat against the device daemon.

One line is one turn. For several lines (a paste, code), open a block with a line holding only
three double quotes (as in Ollama) and close it with another: everything between is one message.
Commands: /reset, /quit.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Iterator
from typing import TextIO

import grpc

from edgellm.client.client import DaemonClient
from edgellm.client.commands.common_args import (
    add_sampling,
    add_window,
    model_defaults,
    params_from_args,
    report_rpc_error,
)
from edgellm.client.connect_args import add_target, client_from
from edgellm.client.failures import FAILED, OK
from edgellm.v1 import device_pb2

BLOCK = '"""'
HELP = f"one line per message; {BLOCK} on its own line opens/closes a multi-line message; /reset, /quit"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `chat` subcommand."""
    p = sub.add_parser("chat", help=f"multi-turn chat in the terminal ({HELP})")
    add_target(p)
    add_sampling(p)
    add_window(p)
    p.add_argument(
        "--system", default=None, help="system message (default: the chat template's own system prompt)"
    )
    p.set_defaults(handler=run)


def messages(stream: TextIO, prompt: str = "you> ", more: str = "...> ") -> Iterator[str]:
    """User turns from a stream: one per non-empty line, or one per triple-quote block of lines."""
    interactive = stream.isatty()
    turns = _Turns()
    while True:
        if interactive:
            sys.stdout.write(prompt if turns.block is None else more)
            sys.stdout.flush()
        line = stream.readline()
        if not line:  # EOF; inside an open block, send what was typed
            last = turns.end()
            if last:
                yield last
            return
        turn = turns.feed(line.rstrip("\r\n"))
        if turn:
            yield turn


class _Turns:
    """Lines in, whole turns out: a stripped line, or the text of a triple-quoted block."""

    def __init__(self) -> None:
        self.block: list[str] | None = None  # the lines of an open block

    def feed(self, text: str) -> str:
        """The turn this line completes ('' when none yet)."""
        if self.block is not None:
            return self._in_block(self.block, text)
        stripped = text.strip()
        if not stripped.startswith(BLOCK):
            return stripped
        rest = stripped[len(BLOCK) :]
        if rest.endswith(BLOCK):  # a whole message between triple quotes on one line
            return rest[: -len(BLOCK)].strip()
        self.block = [rest] if rest else []
        return ""

    def _in_block(self, block: list[str], text: str) -> str:
        if not text.rstrip().endswith(BLOCK):
            block.append(text)
            return ""
        block.append(text.rstrip()[: -len(BLOCK)])
        self.block = None
        return "\n".join(block).strip()

    def end(self) -> str:
        """What an unterminated block holds at end of input ('' when none)."""
        return "" if self.block is None else "\n".join(self.block).strip()


def run(ns: argparse.Namespace) -> int:
    """Read turns from stdin, stream replies, keep the history; non-zero when every turn failed."""
    system: list[tuple[str, str]] = [("system", ns.system)] if ns.system else []
    history = list(system)
    session = uuid.uuid4().hex
    answered = failed = 0
    last_error = OK
    with client_from(ns) as client:
        defaults = model_defaults(client)  # the loaded model's sampling, asked once per chat
        for text in messages(sys.stdin):
            if text in ("/quit", "/exit", "/bye"):
                break
            if text == "/reset":
                history, session = list(system), uuid.uuid4().hex
                continue
            history.append(("user", text))
            request = params_from_args(
                ns, messages=tuple(history), session_id=session, defaults=defaults
            ).to_proto()
            try:
                reply = _stream_reply(client, request)
            except grpc.RpcError as err:
                history.pop()
                failed += 1
                last_error = report_rpc_error(err, ns)
                continue
            answered += 1
            history.append(("assistant", reply))
    if failed and not answered:
        return last_error or FAILED
    return OK


def _stream_reply(client: DaemonClient, request: device_pb2.GenerateRequest) -> str:
    """Print a reply as it streams, then its TTFT and speed; the reply (an RpcError ends the line)."""
    reply = ""
    try:
        for response in client.stream(request):
            if not reply and response.text:
                sys.stdout.write("bot> ")
            reply += response.text
            sys.stdout.write(response.text)
            sys.stdout.flush()
            if response.finish_reason:
                s = response.stats
                sys.stdout.write("\n")
                sys.stderr.write(f"  [TTFT {s.ttft_ms:.0f} ms · {s.decode_tokens_per_second:.1f} tok/s]\n")
    except grpc.RpcError:
        if reply:
            sys.stdout.write("\n")
        raise
    return reply
