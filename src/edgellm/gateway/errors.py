"""OpenAI's error shape, and the one mapping from the daemon's gRPC statuses onto HTTP statuses.

What reaches an HTTP client is a short message per status that says what to do; the daemon's own
text (addresses, gRPC transport detail, token file locations) goes to the gateway's log with the
request id the client sees (L9). Only refusals about the request itself (INVALID_ARGUMENT,
FAILED_PRECONDITION, a queue that is full, an unknown model) pass the daemon's words on: they name
the field or the limit to change.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from starlette.types import Send

from edgellm.common.channel import handshake_failed
from edgellm.common.errors import REFUSAL_KEY, RETRY_AFTER_KEY, THERMAL_REFUSAL

# (HTTP status, OpenAI error type) per gRPC status; anything else is a 500 server_error.
_BY_CODE: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    # The daemon refusing the gateway's own token is the operator's problem, not the caller's key:
    # a 401 would tell an SDK user that *their* key is wrong.
    grpc.StatusCode.UNAUTHENTICATED: (502, "server_error"),
    grpc.StatusCode.PERMISSION_DENIED: (502, "server_error"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout"),
}
# Codes whose daemon text is about the request and says what to change; the others get _SHORT.
_PASS_ON = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
_SHORT: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.UNAVAILABLE: "the device daemon is not reachable: check that it runs (`edgellm status`)",
    grpc.StatusCode.UNAUTHENTICATED: "the device daemon refused the gateway's token: the gateway's "
    "operator must give it the daemon's token (--token-file)",
    grpc.StatusCode.PERMISSION_DENIED: "the device daemon refused the gateway's request",
    grpc.StatusCode.DEADLINE_EXCEEDED: "the device daemon did not answer in time; retry later",
    grpc.StatusCode.NOT_FOUND: "the device has no such item",
}
# gRPC's own refusal of a message over the receiver's size limit ("Received message larger than
# max (9000000 vs. 8388608)", either side): RESOURCE_EXHAUSTED, but no retry will ever fit (L3).
_TOO_LARGE = "message larger than max"


class ApiError(Exception):
    """An error answered as OpenAI does: an HTTP status and {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind
        self.retry_after_s = retry_after_s  # sent as Retry-After (only for real overload)

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI sends with an error."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        """Extra response headers (Retry-After)."""
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}


async def send_error(send: Send, err: ApiError, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer ERR from ASGI middleware (before any route ran)."""
    body = json.dumps(err.body()).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *[(k.lower().encode(), v.encode()) for k, v in err.headers().items()],
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def invalid(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 about the request (naming the offending parameter)."""
    return ApiError(400, message, param=param, code=code)


def too_large(message: str) -> ApiError:
    """A 413: the request is bigger than the gateway or the device takes; retrying cannot help."""
    return ApiError(413, message, code="request_too_large")


def unsupported(param: str, why: str = "") -> ApiError:
    """A 400 for a parameter the gateway does not implement: never silently ignored."""
    detail = f": {why}" if why else ""
    return ApiError(
        400,
        f"Unsupported parameter: '{param}' is not supported by edgellm{detail}.",
        param,
        "unsupported_parameter",
    )


def from_rpc_error(
    err: grpc.aio.AioRpcError | grpc.RpcError, model_loaded: bool | None = None, request_id: str = ""
) -> ApiError:
    """Map a daemon error: INVALID_ARGUMENT→400, NOT_FOUND→404, RESOURCE_EXHAUSTED→429 (413 for a
    message over gRPC's size limit), UNAVAILABLE→503, the daemon refusing the gateway's token→502;
    FAILED_PRECONDITION is 503 when no model is loaded (as llama-server answers while loading),
    else 400. Messages of the other statuses are short; the caller logs the daemon's details."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else str(err)) or str(code)
    special = _special_case(err, code, details, model_loaded)
    if special is not None:
        return special
    name = code.name.lower() if code is not None else "unknown"
    status, kind = _BY_CODE.get(code, (500, "server_error"))
    if code in _PASS_ON:
        retry = 1 if code == grpc.StatusCode.RESOURCE_EXHAUSTED else None  # a full queue: real overload
        return ApiError(status, details, code=name, kind=kind, retry_after_s=retry)
    where = f" (request id {request_id}; the gateway's log has the details)" if request_id else ""
    return ApiError(status, _short(code, details) + where, code=name, kind=kind)


def _special_case(
    err: object, code: grpc.StatusCode, details: str, model_loaded: bool | None
) -> ApiError | None:
    """The answers that depend on more than the status: no model loaded, thermal headroom exhausted,
    too large, unknown model."""
    if code == grpc.StatusCode.FAILED_PRECONDITION and model_loaded is False:
        return ApiError(503, details, code="model_not_loaded", kind="service_unavailable")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and trailer(err, REFUSAL_KEY) == THERMAL_REFUSAL:
        return thermal_error(details, _seconds(trailer(err, RETRY_AFTER_KEY)))
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE in details.lower():
        return too_large(
            "the request is larger than the device daemon accepts (its gRPC message limit): "
            "shorten the prompt or the response_format schema"
        )
    if code == grpc.StatusCode.NOT_FOUND and "model" in details:
        status, kind = _BY_CODE[code]
        return ApiError(status, details, code="model_not_found", kind=kind)
    return None


def thermal_error(message: str, retry_after_s: int | None) -> ApiError:
    """The 503 for a device whose thermal headroom is exhausted: not overload (429), the device's
    surroundings; Retry-After tells a router (LiteLLM's cooldown) when to try it again."""
    return ApiError(
        503,
        message,
        code="thermal_headroom_exhausted",
        kind="service_unavailable",
        retry_after_s=retry_after_s,
    )


def trailer(err: object, key: str) -> str | None:
    """A trailing-metadata value of a failed call (None: absent, or not a call)."""
    read = getattr(err, "trailing_metadata", None)
    metadata = read() if callable(read) else None
    for k, v in metadata or ():
        if k == key:
            return v if isinstance(v, str) else v.decode()
    return None


def _seconds(text: str | None) -> int | None:
    """A Retry-After value in whole seconds (None when missing or not a number)."""
    try:
        return max(1, int(text)) if text is not None else None
    except ValueError:
        return None


def _short(code: grpc.StatusCode, details: str) -> str:
    """The short message of a status whose daemon details stay in the gateway's log."""
    if code == grpc.StatusCode.UNAVAILABLE and handshake_failed(details):
        return (
            "the server on the device daemon's port is not the daemon this gateway trusts (its TLS "
            "certificate did not match), so the gateway sent it nothing"
        )
    if code == grpc.StatusCode.UNAVAILABLE and "refused" in details.lower():
        return (
            "the device daemon is not reachable: nothing listens on its port (stopped, restarting, "
            "or `adb forward` is gone); check that it runs (`edgellm status`). The gateway retries "
            "every 2 s"
        )
    return _SHORT.get(code, "the device daemon failed to answer")
