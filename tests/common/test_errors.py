"""Exceptions to gRPC status codes: only InvalidArgument blames the request."""

from __future__ import annotations

import grpc
import pytest

from edgellm.common.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    status_for,
)


@pytest.mark.parametrize(
    ("exc", "code", "message"),
    [
        (
            InvalidArgument("top_p must be in [0, 1]"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "top_p must be in [0, 1]",
        ),
        (NotFound("no model x"), grpc.StatusCode.NOT_FOUND, "no model x"),
        (ResourceExhausted("queue is full"), grpc.StatusCode.RESOURCE_EXHAUSTED, "queue is full"),
        (FailedPrecondition("no model is loaded"), grpc.StatusCode.FAILED_PRECONDITION, "no model is loaded"),
        (Unavailable("shutting down"), grpc.StatusCode.UNAVAILABLE, "shutting down"),
        (MemoryError(), grpc.StatusCode.RESOURCE_EXHAUSTED, "out of memory"),
        # L9: the file's name, never the device's absolute path.
        (
            FileNotFoundError(2, "No such file or directory", "/data/data/com.termux/files/home/gone.bin"),
            grpc.StatusCode.NOT_FOUND,
            "gone.bin was not found on the server",
        ),
        # A plain ValueError is a broken invariant inside the daemon, not the client's fault.
        # ... and its text (paths, errno) stays in the log: finding S16.
        (ValueError("nothing to feed"), grpc.StatusCode.INTERNAL, "internal error (ValueError)"),
        (OSError(36, "File name too long", "/data/x"), grpc.StatusCode.INTERNAL, "internal error (OSError)"),
    ],
)
def test_each_error_gets_its_status(exc: BaseException, code: grpc.StatusCode, message: str) -> None:
    assert status_for(exc) == (code, message)
