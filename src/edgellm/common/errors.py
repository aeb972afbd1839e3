"""Domain errors and their one mapping onto gRPC status codes."""

from __future__ import annotations

from pathlib import PurePath

import grpc

# gRPC trailing metadata on a refusal that will pass: why (machine-readable), and when to come back
# (whole seconds, as HTTP's Retry-After). google.rpc.RetryInfo in grpc-status-details-bin is the
# canonical carrier but needs googleapis-common-protos, which the phone's client set does not have.
REFUSAL_KEY = "edgellm-refusal"
RETRY_AFTER_KEY = "retry-after"
THERMAL_REFUSAL = "thermal-headroom-exhausted"  # governor/capacity.py


class EdgeError(Exception):
    """Base class: an error with a gRPC status a person can act on."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    trailers: tuple[tuple[str, str], ...] = ()  # gRPC trailing metadata sent with the status (a retry hint)


class InvalidArgument(EdgeError, ValueError):
    """The request itself is wrong."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(EdgeError, LookupError):
    """A named model, artifact, session or job does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class ResourceExhausted(EdgeError):
    """Queue full, memory or disk too small."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(EdgeError):
    """The system is not in a state that allows the request (e.g. no model loaded)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(EdgeError):
    """The engine died or is shutting down."""

    code = grpc.StatusCode.UNAVAILABLE


class AlreadyExists(EdgeError):
    """Something with this identity is already live (a request id in use)."""

    code = grpc.StatusCode.ALREADY_EXISTS


class DeadlineExceeded(EdgeError):
    """The peer stayed silent longer than the server waits (an idle push)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class PermissionDenied(EdgeError):
    """The caller is authenticated but may not do this (a path or target outside what is allowed)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(EdgeError):
    """Missing or wrong credentials."""

    code = grpc.StatusCode.UNAUTHENTICATED


def trailers_for(exc: BaseException) -> tuple[tuple[str, str], ...]:
    """The trailing metadata a refusal carries (a domain error's own; nothing for anything else)."""
    return exc.trailers if isinstance(exc, EdgeError) else ()


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """Map any exception to (status code, message) for a gRPC abort.

    Only an `InvalidArgument` blames the request. A plain ValueError comes from a broken invariant
    inside the daemon (e.g. the KV cache asked to feed nothing) or from a library, so it is INTERNAL,
    named by its type, and logged with its traceback.
    """
    if isinstance(exc, EdgeError):
        return exc.code, str(exc)
    if isinstance(exc, MemoryError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, "out of memory"
    if isinstance(exc, FileNotFoundError):
        # Only the file's own name: str(exc) carries the absolute device path (finding L9); the
        # caller logs the exception with its path.
        name = PurePath(str(exc.filename or exc)).name
        return grpc.StatusCode.NOT_FOUND, f"{name} was not found on the server"
    # Why not the exception's text: it carries absolute device paths and errno details (finding
    # S16); the caller gets the request id, the log keeps the traceback under that id.
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__})"
