"""`edgellm generate PROMPT|-`: stream tokens from the daemon and print a one-line summary."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from edgellm.client.client import finish_reason_name
from edgellm.client.commands.common_args import (
    add_sampling,
    add_window,
    loaded_model,
    params_from_args,
    read_text_arg,
)
from edgellm.client.connect_args import add_target, client_from
from edgellm.client.failures import FAILED, OK
from edgellm.client.params import Constraint, GenerateParams
from edgellm.client.prefill_notice import PrefillNotice
from edgellm.client.sampling import for_model
from edgellm.common.errors import InvalidArgument
from edgellm.v1 import common_pb2, device_pb2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `generate` subcommand."""
    p = sub.add_parser("generate", help="stream a completion from the device daemon")
    add_target(p)
    add_sampling(p)
    add_window(p)
    form = p.add_mutually_exclusive_group()
    form.add_argument(
        "--chat",
        action="store_true",
        help="send the prompt as a user message through the model's chat template (the default "
        "when the loaded model has one)",
    )
    form.add_argument(
        "--raw",
        "--no-chat",
        dest="raw",
        action="store_true",
        help="complete the prompt as raw text, without the chat template (the default for a model "
        "without one)",
    )
    p.add_argument(
        "--system",
        default=None,
        help="system message (implies --chat; default: the chat template's own system prompt)",
    )
    p.add_argument("--quiet-stats", action="store_true", help="don't print the summary line on stderr")
    p.add_argument(
        "--prompt-file", type=Path, default=None, metavar="FILE", help="read the prompt from FILE (UTF-8)"
    )
    shape = p.add_mutually_exclusive_group()
    shape.add_argument(
        "--json-schema", metavar="FILE", type=Path, help="answer with JSON valid against this JSON Schema"
    )
    shape.add_argument("--json-object", action="store_true", help="answer with a JSON object")
    shape.add_argument("--regex", metavar="PATTERN", help="answer with text matching this regular expression")
    shape.add_argument(
        "--grammar", metavar="FILE", type=Path, help="answer in this Lark grammar (llguidance)"
    )
    p.add_argument(
        "prompt", nargs="?", default=None, help="the prompt text, or - to read it from stdin (any length)"
    )
    p.set_defaults(handler=run)


def constraint_from(ns: argparse.Namespace) -> Constraint | None:
    """The output constraint the flags ask for (None for free text); InvalidArgument if a file is unusable."""
    if ns.json_object:
        return Constraint("json_object")
    if ns.regex is not None:
        return Constraint("regex", ns.regex)
    if ns.json_schema is None and ns.grammar is None:
        return None
    flag, path = (
        ("--json-schema", ns.json_schema) if ns.json_schema is not None else ("--grammar", ns.grammar)
    )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidArgument(f"{flag} {path}: {err}") from err
    if ns.grammar is not None:
        return Constraint("lark_grammar", text)
    try:
        json.loads(text)  # a typo is caught here; the daemon checks the schema itself
    except json.JSONDecodeError as err:
        raise InvalidArgument(f"{flag} {path} is not valid JSON: {err}") from err
    return Constraint("json_schema", text)


def drafts(s: device_pb2.GenerateStats) -> str:
    """The speculative-decoding part of the summary ('' when nothing was drafted)."""
    if not s.draft_tokens:
        return ""
    repaired = f", {s.repaired_tokens} re-decoded" if s.repaired_tokens else ""
    return f" · drafts {s.accepted_draft_tokens}/{s.draft_tokens} accepted{repaired}"


def cut_short(constraint: Constraint | None, max_new_tokens: int) -> str:
    """Why a constrained answer that hit the token budget is not the shape asked for."""
    kind = constraint.kind if constraint is not None else None
    shape = {"json_schema": "JSON", "json_object": "JSON", "regex": "match", "lark_grammar": "grammar"}
    return (
        f"edgellm generate: the answer reached --max-new-tokens {max_new_tokens} before the "
        f"{shape.get(kind or '', 'constraint')} was complete, so it is cut off and not valid; raise "
        "--max-new-tokens, or bound the schema (maxLength, maxItems, maximum)\n"
    )


def run(ns: argparse.Namespace) -> int:
    """Stream one generation to stdout; the summary goes to stderr.

    Exit status 1 when a constrained answer ran out of tokens (what was printed is not valid), or
    when the answer is empty (stderr says why and what to pass).
    """
    constraint = constraint_from(ns)
    if ns.raw and ns.system is not None:
        raise InvalidArgument("--system is a chat message: drop --raw (or --system)")
    text = read_text_arg(ns.prompt, ns.prompt_file)
    out = sys.stdout
    wrote = False
    status = OK
    tokens = 0
    try:
        with client_from(ns) as client, PrefillNotice(len(text)) as notice:
            model = loaded_model(client)
            chat = as_chat(ns, model)
            request = _params(ns, text, chat, constraint, for_model(model)).to_proto()
            start = time.perf_counter()
            first: float | None = None
            for response in client.stream(request):
                notice.done()
                tokens += len(response.token_ids)
                if response.text:
                    first = time.perf_counter() - start if first is None else first
                    wrote = True  # before the write: Ctrl-C may land inside it
                    out.write(response.text)
                    out.flush()
                if response.finish_reason:
                    out.write("\n" if first is not None else "")  # an empty answer prints nothing
                    wrote = False
                    status = _finished(ns, response, first, constraint)
                    status = _empty(response, chat, model) or status
    except KeyboardInterrupt:
        _end_line(out, wrote)  # the answer's line first, then the note, on a shared terminal
        wrote = False
        if not ns.quiet_stats:
            sys.stderr.write(f"[interrupted] after {tokens} tokens\n")
        raise
    finally:
        _end_line(out, wrote)  # cut off by an error: end the line so the shell prompt starts clean
    return status


def _end_line(out: TextIO, wrote: bool) -> None:
    if wrote:
        out.write("\n")
        out.flush()


def as_chat(ns: argparse.Namespace, model: common_pb2.ArtifactInfo | None) -> bool:
    """Whether the prompt goes as a chat message: --chat/--system, else unless --raw, when the
    loaded model has a chat template (a chat-tuned model ends most raw completions at once)."""
    if ns.raw:
        return False
    return ns.chat or ns.system is not None or (model is not None and model.chat_tuned)


def _params(
    ns: argparse.Namespace,
    text: str,
    chat: bool,
    constraint: Constraint | None,
    defaults: GenerateParams,
) -> GenerateParams:
    """The prompt (or, as chat, the chat messages) and the options' parameters."""
    if chat:
        # A chat message is stripped like a chat turn (`edgellm chat` sends lines without their ends).
        messages = ((("system", ns.system),) if ns.system else ()) + (("user", text.strip()),)
        return params_from_args(ns, messages=messages, constraint=constraint, defaults=defaults)
    return params_from_args(ns, prompt=text, constraint=constraint, defaults=defaults)


def _finished(
    ns: argparse.Namespace,
    response: device_pb2.GenerateResponse,
    first: float | None,
    constraint: Constraint | None,
) -> int:
    """Print the summary line (unless --quiet-stats); FAILED when a constrained answer was cut off."""
    if not ns.quiet_stats:
        s = response.stats
        sys.stderr.write(
            f"[{finish_reason_name(response.finish_reason)}] "
            f"TTFT {s.ttft_ms:.0f} ms (client {1000 * (first or 0):.0f} ms) · "
            f"prefill {s.prompt_tokens} tok @ {s.prefill_tokens_per_second:.0f} tok/s · "
            f"decode {s.completion_tokens} tok @ {s.decode_tokens_per_second:.1f} tok/s"
            f"{drafts(s)}\n"
        )
    if constraint is not None and response.finish_reason == device_pb2.FINISH_REASON_LENGTH:
        sys.stderr.write(cut_short(constraint, ns.max_new_tokens))
        return FAILED
    return OK


def _empty(response: device_pb2.GenerateResponse, chat: bool, model: common_pb2.ArtifactInfo | None) -> int:
    """FAILED, with why and what to pass, when the answer has no token; OK otherwise."""
    if response.stats.completion_tokens or response.finish_reason != device_pb2.FINISH_REASON_STOP:
        return OK
    sys.stderr.write(
        f"edgellm generate: the model ended its answer at once (0 tokens): {empty_hint(chat, model)}\n"
    )
    return FAILED


def empty_hint(chat: bool, model: common_pb2.ArtifactInfo | None) -> str:
    """What to change after an empty answer, for the form the prompt was sent in."""
    if chat:
        return "rephrase the prompt, or sample more freely (--temperature 0.7)"
    if model is not None and model.chat_tuned:
        return f"{model.name or 'the model'} is chat-tuned and ends raw completions; drop --raw"
    return (
        "a chat-tuned model ends raw completions; pass --chat, or end the prompt where the answer "
        "should start"
    )
