"""Arguments and helpers several client subcommands share."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import grpc

from edgellm.common.errors import EdgeError
from edgellm.common.security_args import add_client_security
from edgellm.common.targets import DEFAULT_TARGET

if TYPE_CHECKING:
    from edgellm.client.client import DaemonClient as DaemonClientType


def add_target(parser: argparse.ArgumentParser) -> None:
    """--target H:P (default $EDGELLM_TARGET, then 127.0.0.1:50051), and the token/TLS options."""
    parser.add_argument(
        "--target", default=None, help=f"daemon address (default: $EDGELLM_TARGET, then {DEFAULT_TARGET})"
    )
    add_client_security(parser)


def client_from(ns: argparse.Namespace, timeout: float | None = None) -> DaemonClientType:
    """A DaemonClient for --target with the token and TLS found from the options, env or config."""
    from edgellm.client.channel import ChannelSecurity
    from edgellm.client.client import DaemonClient

    security = ChannelSecurity.find(token_file=ns.token_file, tls_ca=ns.tls_ca, tls_pin=ns.tls_pin)
    return DaemonClient(ns.target, timeout=timeout, security=security)


def add_sampling(parser: argparse.ArgumentParser) -> None:
    """Generation length and sampling options."""
    parser.add_argument(
        "--max-new-tokens", type=int, default=256, help="tokens to generate at most (default 256)"
    )
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--min-p", type=float, default=0.0)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def sampling_kwargs(ns: argparse.Namespace) -> dict[str, float]:
    """The SamplingParams fields from parsed arguments."""
    return {
        "top_k": ns.top_k,
        "top_p": ns.top_p,
        "min_p": ns.min_p,
        "repetition_penalty": ns.repetition_penalty,
    }


def report_rpc_error(err: grpc.RpcError | EdgeError) -> int:
    """Print a gRPC error (or a client-side refusal) for a person and return the exit code."""
    if isinstance(err, EdgeError):
        sys.stderr.write(f"edgellm: {err.code.name}: {err}\n")
        return 1
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    name = code.name if code is not None else "ERROR"
    sys.stderr.write(f"edgellm: {name}: {details}\n")
    return 2 if code == grpc.StatusCode.INVALID_ARGUMENT else 1
