"""Arguments and helpers several client subcommands share."""

from __future__ import annotations

import argparse
import sys

import grpc

from edgellm.common.targets import DEFAULT_TARGET


def add_target(parser: argparse.ArgumentParser) -> None:
    """--target H:P (default $EDGELLM_TARGET, then 127.0.0.1:50051)."""
    parser.add_argument(
        "--target", default=None, help=f"daemon address (default: $EDGELLM_TARGET, then {DEFAULT_TARGET})"
    )


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
    parser.add_argument(
        "--speculation",
        choices=("auto", "off"),
        default="auto",
        help="speculative decoding: auto drafts from the prompt where it pays (same output), off never",
    )


def sampling_kwargs(ns: argparse.Namespace) -> dict[str, float]:
    """The SamplingParams fields from parsed arguments."""
    return {
        "top_k": ns.top_k,
        "top_p": ns.top_p,
        "min_p": ns.min_p,
        "repetition_penalty": ns.repetition_penalty,
    }


def report_rpc_error(err: grpc.RpcError) -> int:
    """Print a gRPC error for a person and return the exit code."""
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    name = code.name if code is not None else "ERROR"
    sys.stderr.write(f"edgellm: {name}: {details}\n")
    return 2 if code == grpc.StatusCode.INVALID_ARGUMENT else 1
