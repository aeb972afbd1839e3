"""Arguments and helpers several client subcommands share."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import grpc

from edgellm.client.client import DaemonClient
from edgellm.client.failures import Peer, peer_of, rpc_failure
from edgellm.client.params import SPECULATION, Constraint, GenerateParams
from edgellm.client.sampling import RECOMMENDED, for_model
from edgellm.common.argtypes import float_in, non_negative_int, positive_int
from edgellm.common.errors import InvalidArgument
from edgellm.v1 import common_pb2

# The sampling options whose default is the loaded model's (params_from_args fills them in).
MODEL_DEFAULTED = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty")


def _by_model(value: float) -> str:
    """The help's default for an option the loaded model's own defaults fill in (docs/cli.md)."""
    return f"(default: the loaded model's, from its generation_config.json; {value} for the bundled SmolLM2)"


def add_sampling(parser: argparse.ArgumentParser, defaults: GenerateParams = RECOMMENDED) -> None:
    """Generation length and sampling options; an unset sampling option is the loaded model's default."""
    parser.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=defaults.max_new_tokens,
        help="tokens to generate at most",
    )
    parser.add_argument(
        "--temperature",
        type=float_in(0.0),
        default=None,
        help=f"0 = greedy (argmax) {_by_model(defaults.temperature)}",
    )
    parser.add_argument(
        "--top-k", type=non_negative_int, default=None, help=f"0 = off {_by_model(defaults.top_k)}"
    )
    parser.add_argument(
        "--top-p", type=float_in(0.0, 1.0), default=None, help=f"nucleus; 1 = off {_by_model(defaults.top_p)}"
    )
    parser.add_argument(
        "--min-p", type=float_in(0.0, 1.0), default=None, help=f"0 = off {_by_model(defaults.min_p)}"
    )
    parser.add_argument(
        "--frequency-penalty",
        type=float_in(-2.0, 2.0),
        default=None,
        help=(
            "subtract this times a token's count in the answer so far from its logit; 0 = off "
            f"(default: the loaded model's, {defaults.frequency_penalty} for the bundled SmolLM2; "
            "0 with an output constraint)"
        ),
    )
    parser.add_argument(
        "--presence-penalty",
        type=float_in(-2.0, 2.0),
        default=None,
        help="subtract this from the logit of every token already in the answer; 0 = off "
        + _by_model(defaults.presence_penalty),
    )
    parser.add_argument(
        "--repetition-penalty",
        type=float_in(1e-3),
        default=None,
        help="divide positive logits of tokens seen in the prompt or the answer; 1 = off "
        + _by_model(defaults.repetition_penalty),
    )
    parser.add_argument(
        "--seed", type=non_negative_int, default=defaults.seed, help="sampling seed (default: random)"
    )
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument(
        "--speculation",
        choices=tuple(SPECULATION),
        default=defaults.speculation,
        help=(
            "speculative decoding: auto (default) drafts from the prompt where it pays, with the "
            "same greedy output and the same sampling distribution (docs/speculation.md); off never; "
            "fast drafts greedy requests freely too, faster on text that repeats the prompt, but a "
            "near-tie may pick another token than off"
        ),
    )


def add_window(parser: argparse.ArgumentParser) -> None:
    """--kv-window: a per-request sliding window (GenerateRequest.kv_window)."""
    parser.add_argument(
        "--kv-window",
        type=non_negative_int,
        default=GenerateParams().kv_window,
        metavar="N",
        help="slide a KV window of N tokens (>= 64) for this request, so a prompt or conversation longer "
        "than the model's context still runs (only its start and the last N tokens stay in view); "
        "0 = the daemon's setting",
    )


def params_from_args(
    ns: argparse.Namespace,
    prompt: str = "",
    messages: tuple[tuple[str, str], ...] = (),
    session_id: str = "",
    constraint: Constraint | None = None,
    defaults: GenerateParams = RECOMMENDED,
) -> GenerateParams:
    """The GenerateParams that add_sampling's and add_window's options ask for, around this input.

    A sampling option left unset takes DEFAULTS' value (the loaded model's: `model_defaults`).
    """
    sampling: dict[str, Any] = {
        name: _given(getattr(ns, name), getattr(defaults, name)) for name in MODEL_DEFAULTED
    }
    return GenerateParams(
        prompt=prompt,
        messages=messages,
        max_new_tokens=ns.max_new_tokens,
        seed=ns.seed,
        stop=tuple(ns.stop),
        session_id=session_id,
        kv_window=ns.kv_window,
        constraint=constraint,
        speculation=ns.speculation,
        frequency_penalty=frequency_penalty(ns, constraint is not None, defaults),
        **sampling,
    )


def _given(value: float | None, default: float) -> float:
    return default if value is None else value


def loaded_model(client: DaemonClient) -> common_pb2.ArtifactInfo | None:
    """The daemon's loaded model (None when none is loaded or GetStatus fails).

    Why a failed GetStatus is not an error here: the Generate call that follows fails the same
    way and reports it with the command's own message.
    """
    try:
        status = client.status()
    except grpc.RpcError:
        return None
    return status.model if status.HasField("model") else None


def model_defaults(client: DaemonClient) -> GenerateParams:
    """The loaded model's sampling defaults, asked of the daemon (RECOMMENDED when it reports none)."""
    return for_model(loaded_model(client))


def read_text_arg(value: str | None, file: Path | None, what: str = "prompt") -> str:
    """The text itself, `-` for stdin, or the contents of --prompt-file (UTF-8); never empty.

    VALUE is None when no argument was given. Text read from stdin or a file loses one final
    newline (what `echo` and editors add): a small model answers a question that ends in a newline
    differently (SmolLM2-135M, greedy, "What is the capital of France?": Paris without the
    newline, an invented "L'Étoile" with it). Blank text is refused: the model would ramble on
    from its chat template alone.
    """
    if file is not None:
        if value is not None:
            raise InvalidArgument(f"give the {what} as an argument or with --{what}-file, not both")
        return _not_blank(file.read_text(encoding="utf-8").removesuffix("\n"), what, f"{file} is empty")
    if value == "-":
        return _not_blank(sys.stdin.read().removesuffix("\n"), what, "stdin was empty")
    if value is None:
        raise InvalidArgument(f"no {what}: pass it as an argument, `-` to read stdin, or --{what}-file FILE")
    return _not_blank(value, what, "the argument is empty")


def _not_blank(text: str, what: str, where: str) -> str:
    if not text.strip():
        whitespace = "" if not text else " (only whitespace)"
        raise InvalidArgument(f"the {what} is empty: {where}{whitespace}; give the text to send")
    return text


def report_rpc_error(
    err: grpc.RpcError, ns: argparse.Namespace | None = None, peer: Peer | None = None
) -> int:
    """Print a gRPC error for a person (with what to do next) and return the exit status."""
    failure = rpc_failure(err, peer or (peer_of(ns) if ns is not None else Peer()))
    words = [getattr(ns, name, None) for name in ("command", "verb", "action")] if ns is not None else []
    sys.stderr.write(" ".join(["edgellm", *(w for w in words if w)]) + f": {failure.message}\n")
    return failure.exit_code


def frequency_penalty(
    ns: argparse.Namespace, constrained: bool = False, defaults: GenerateParams = RECOMMENDED
) -> float:
    """--frequency-penalty; when unset, 0 under an output constraint and DEFAULTS' one otherwise."""
    if ns.frequency_penalty is not None:
        return float(ns.frequency_penalty)
    # Why 0 under a constraint: JSON repeats its quotes and commas by design, and penalising
    # them pushed the model into whitespace until max_new_tokens cut the JSON off.
    return 0.0 if constrained else defaults.frequency_penalty
