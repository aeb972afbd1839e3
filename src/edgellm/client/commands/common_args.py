"""Arguments and helpers several client subcommands share."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc

from edgellm.client.client import DaemonClient
from edgellm.client.failures import Peer, peer_of, rpc_failure
from edgellm.client.params import SPECULATION, Constraint, GenerateParams
from edgellm.client.sampling import RECOMMENDED, SamplingDefaults
from edgellm.common.argtypes import float_in, non_negative_int, positive_int
from edgellm.common.channel import ChannelSecurity
from edgellm.common.errors import InvalidArgument
from edgellm.common.security_args import add_client_security
from edgellm.common.targets import DEFAULT_TARGET, TARGET_ENV


def add_target(parser: argparse.ArgumentParser, nested: bool = False) -> None:
    """--target H[:P] (default $EDGELLM_TARGET, then 127.0.0.1:50051; a missing port means 50051),
    and --token-file / --tls-ca / --tls-pin.

    nested: on a sub-subcommand whose parent also takes --target (given either before or after
    the verb); SUPPRESS keeps the child's unset default from overwriting the parent's value.
    """
    parser.add_argument(
        "--target",
        default=argparse.SUPPRESS if nested else None,
        metavar="HOST[:PORT]",
        help=f"daemon address (default: ${TARGET_ENV}, then {DEFAULT_TARGET}; port 50051 when omitted)",
    )
    add_client_security(parser, nested)


def security_from(ns: argparse.Namespace) -> ChannelSecurity:
    """The token and TLS trust from --token-file/--tls-ca/--tls-pin, else found without flags."""
    return ChannelSecurity.find(
        token_file=getattr(ns, "token_file", None),
        tls_ca=getattr(ns, "tls_ca", None),
        tls_pin=getattr(ns, "tls_pin", None),
        insecure_loopback=getattr(ns, "insecure_loopback", False),
        target=peer_of(ns).target,  # a deployed phone's own token is kept per address (L14)
    )


def client_from(ns: argparse.Namespace, timeout: float | None = None) -> DaemonClient:
    """A DaemonClient for --target with the token and TLS from the options, environment or config."""
    return DaemonClient(ns.target, timeout=timeout, security=security_from(ns))


def add_sampling(parser: argparse.ArgumentParser, defaults: SamplingDefaults = RECOMMENDED) -> None:
    """Generation length and sampling options, defaulting to what suits the bundled chat model."""
    parser.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=defaults.max_new_tokens,
        help="tokens to generate at most",
    )
    parser.add_argument(
        "--temperature", type=float_in(0.0), default=defaults.temperature, help="0 = greedy (argmax)"
    )
    parser.add_argument("--top-k", type=non_negative_int, default=defaults.top_k, help="0 = off")
    parser.add_argument("--top-p", type=float_in(0.0, 1.0), default=defaults.top_p, help="nucleus; 1 = off")
    parser.add_argument("--min-p", type=float_in(0.0, 1.0), default=defaults.min_p, help="0 = off")
    parser.add_argument(
        "--frequency-penalty",
        type=float_in(-2.0, 2.0),
        default=None,
        help=(
            "subtract this times a token's count in the answer so far from its logit; 0 = off "
            f"(default: {defaults.frequency_penalty}; 0 with an output constraint)"
        ),
    )
    parser.add_argument(
        "--presence-penalty",
        type=float_in(-2.0, 2.0),
        default=defaults.presence_penalty,
        help="subtract this from the logit of every token already in the answer; 0 = off",
    )
    parser.add_argument(
        "--repetition-penalty",
        type=float_in(1e-3),
        default=defaults.repetition_penalty,
        help="divide positive logits of tokens seen in the prompt or the answer; 1 = off",
    )
    parser.add_argument("--seed", type=non_negative_int, default=None, help="sampling seed (default: random)")
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument(
        "--speculation",
        choices=tuple(SPECULATION),
        default="auto",
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
        default=0,
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
) -> GenerateParams:
    """The GenerateParams that add_sampling's and add_window's options ask for, around this input."""
    return GenerateParams(
        prompt=prompt,
        messages=messages,
        max_new_tokens=ns.max_new_tokens,
        temperature=ns.temperature,
        seed=ns.seed,
        stop=tuple(ns.stop),
        session_id=session_id,
        kv_window=ns.kv_window,
        constraint=constraint,
        speculation=ns.speculation,
        top_k=ns.top_k,
        top_p=ns.top_p,
        min_p=ns.min_p,
        repetition_penalty=ns.repetition_penalty,
        frequency_penalty=frequency_penalty(ns, constrained=constraint is not None),
        presence_penalty=ns.presence_penalty,
    )


def sampling_kwargs(ns: argparse.Namespace, constrained: bool = False) -> dict[str, float]:
    """The SamplingParams fields from parsed arguments (CONSTRAINED: the request has an output constraint)."""
    return {
        "top_k": ns.top_k,
        "top_p": ns.top_p,
        "min_p": ns.min_p,
        "repetition_penalty": ns.repetition_penalty,
        "frequency_penalty": frequency_penalty(ns, constrained),
        "presence_penalty": ns.presence_penalty,
    }


def read_text_arg(value: str, file: Path | None, what: str = "prompt") -> str:
    """The text itself, `-` for stdin, or the contents of --prompt-file (UTF-8).

    Text read from stdin or a file loses one final newline (what `echo` and editors add): a small
    model answers a question that ends in a newline differently (SmolLM2-135M, greedy, "What is
    the capital of France?": Paris without the newline, an invented "L'Étoile" with it).
    """
    if file is not None:
        if value:
            raise InvalidArgument(f"give the {what} as an argument or with --{what}-file, not both")
        return file.read_text(encoding="utf-8").removesuffix("\n")
    if value == "-":
        return sys.stdin.read().removesuffix("\n")
    if not value:
        raise InvalidArgument(f"no {what}: pass it as an argument, `-` to read stdin, or --{what}-file FILE")
    return value


def report_rpc_error(
    err: grpc.RpcError, ns: argparse.Namespace | None = None, peer: Peer | None = None
) -> int:
    """Print a gRPC error for a person (with what to do next) and return the exit status."""
    failure = rpc_failure(err, peer or (peer_of(ns) if ns is not None else Peer()))
    words = [getattr(ns, name, None) for name in ("command", "verb", "action")] if ns is not None else []
    sys.stderr.write(" ".join(["edgellm", *(w for w in words if w)]) + f": {failure.message}\n")
    return failure.exit_code


def frequency_penalty(ns: argparse.Namespace, constrained: bool = False) -> float:
    """--frequency-penalty; when unset, 0 under an output constraint and the recommended one otherwise."""
    if ns.frequency_penalty is not None:
        return float(ns.frequency_penalty)
    # Why 0 under a constraint: JSON repeats its quotes and commas by design, and penalising
    # them pushed the model into whitespace until max_new_tokens cut the JSON off.
    return 0.0 if constrained else RECOMMENDED.frequency_penalty
