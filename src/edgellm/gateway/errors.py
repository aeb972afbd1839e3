"""OpenAI's error shape, and the one mapping from the daemon's gRPC statuses onto HTTP statuses."""

from __future__ import annotations

from typing import Any

import grpc

# (HTTP status, OpenAI error type) per gRPC status; anything else is a 500 server_error.
_BY_CODE: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout"),
}


class ApiError(Exception):
    """An error answered as OpenAI does: an HTTP status and {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI sends with an error."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 about the request (naming the offending parameter)."""
    return ApiError(400, message, param=param, code=code)


def unsupported(param: str, why: str = "") -> ApiError:
    """A 400 for a parameter the gateway does not implement: never silently ignored."""
    detail = f": {why}" if why else ""
    return ApiError(
        400,
        f"Unsupported parameter: '{param}' is not supported by edgellm{detail}.",
        param,
        "unsupported_parameter",
    )


def from_rpc_error(err: grpc.aio.AioRpcError | grpc.RpcError, model_loaded: bool | None = None) -> ApiError:
    """Map a daemon error: INVALID_ARGUMENT→400, UNAUTHENTICATED→401, NOT_FOUND→404,
    RESOURCE_EXHAUSTED→429, UNAVAILABLE→503; FAILED_PRECONDITION is 503 when no model is loaded
    (as llama-server answers while loading), else 400."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else str(err)) or str(code)
    if code == grpc.StatusCode.FAILED_PRECONDITION and model_loaded is False:
        return ApiError(503, details, code="model_not_loaded", kind="service_unavailable")
    status, kind = _BY_CODE.get(code, (500, "server_error"))
    if code == grpc.StatusCode.UNAVAILABLE:
        details = f"the device daemon is unavailable: {details}"
    name = code.name.lower() if code is not None else "unknown"
    if code == grpc.StatusCode.NOT_FOUND and "model" in details:
        name = "model_not_found"
    return ApiError(status, details, code=name, kind=kind)
