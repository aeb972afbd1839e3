"""A small synchronous Python client for the device daemon."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ParamSpec

import grpc

from edgellm.client.params import SPECULATION, GenerateParams
from edgellm.common.channel import MAX_MESSAGE_BYTES, ChannelSecurity, open_channel
from edgellm.common.targets import resolve_target
from edgellm.v1 import device_pb2, device_pb2_grpc

P = ParamSpec("P")

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SPECULATION",
    "Completion",
    "DaemonClient",
    "build_request",
    "finish_reason_name",
    "params_from",
]


@dataclass
class Completion:
    """A finished generation as the client saw it."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = ""
    stats: device_pb2.GenerateStats | None = None
    client_ttft_ms: float = 0.0
    client_total_ms: float = 0.0


def finish_reason_name(value: int) -> str:
    """'stop', 'length', ... from the FinishReason enum."""
    return str(device_pb2.FinishReason.Name(value)).removeprefix("FINISH_REASON_").lower()  # type: ignore[arg-type]


class DaemonClient:
    """Blocking client over one channel; use as a context manager.

    Every call on `channel`/`stub` carries the bearer token (edgellm.common.channel.open_channel,
    on the channel's credentials); `metadata` stays empty for callers that pass it on.
    """

    def __init__(
        self,
        target: str | None = None,
        timeout: float | None = None,
        token: str | None = None,
        security: ChannelSecurity | None = None,
    ) -> None:
        self.target = resolve_target(target)
        self.timeout = timeout
        # The token rides on the channel's credentials (edgellm.common.channel); per-call metadata
        # stays empty and is kept for callers that pass it on.
        self.metadata: tuple[tuple[str, str], ...] = ()
        self.security = security if security is not None else ChannelSecurity.find(token, target=self.target)
        self.channel = open_channel(self.target, self.security)
        self.stub = device_pb2_grpc.DeviceDaemonStub(self.channel)

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until the channel connects (raises grpc.FutureTimeoutError)."""
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def stream(self, request: device_pb2.GenerateRequest) -> Iterator[device_pb2.GenerateResponse]:
        """Raw response stream for a request (cancel by closing the iterator)."""
        call = self.stub.Generate(request, timeout=self.timeout)
        try:
            yield from call
        finally:
            call.cancel()

    def generate(self, *args: Any, params: GenerateParams | None = None, **values: Any) -> Completion:
        """Run a whole generation and collect it: `params_from`'s arguments (a constraint may be
        an OutputConstraint message or a Constraint)."""
        return self.complete(params_from(*args, params=params, **values))

    def complete(self, params: GenerateParams) -> Completion:
        """Run a whole generation of `params` and collect it."""
        out = Completion()
        start = time.perf_counter()
        for response in self.stream(params.to_proto()):
            if response.token_ids and not out.token_ids:
                out.client_ttft_ms = (time.perf_counter() - start) * 1000
            out.text += response.text
            out.token_ids.extend(response.token_ids)
            if response.finish_reason:
                out.finish_reason = finish_reason_name(response.finish_reason)
                out.stats = response.stats
        out.client_total_ms = (time.perf_counter() - start) * 1000
        return out

    def status(self) -> device_pb2.DaemonStatus:
        """The daemon's status."""
        return self.stub.GetStatus(device_pb2.GetStatusRequest(), timeout=self.timeout or 10.0)


# The Python client's positional order before GenerateParams; every other field goes by name.
_POSITIONAL = (
    "prompt",
    "messages",
    "max_new_tokens",
    "temperature",
    "seed",
    "stop",
    "session_id",
    "speculation",
)


def params_from(*args: Any, params: GenerateParams | None = None, **values: Any) -> GenerateParams:
    """GenerateParams from plain Python values: PARAMS (default: the wire's) with these fields changed.

    Positional: prompt, messages, max_new_tokens, temperature, seed, stop, session_id, speculation;
    any field of GenerateParams by name (`**RECOMMENDED.sampling()` for the CLI's sampling). The
    defaults are GenerateParams' own, written nowhere else; an unknown name is a TypeError.
    """
    if len(args) > len(_POSITIONAL):
        raise TypeError(f"params_from takes at most {len(_POSITIONAL)} positional arguments, got {len(args)}")
    given = dict(zip(_POSITIONAL, args, strict=False))
    twice = given.keys() & values.keys()
    if twice:
        raise TypeError(f"params_from got multiple values for {', '.join(sorted(twice))}")
    return GenerateParams.of(params, **given, **values)


def _as_request(make: Callable[P, GenerateParams]) -> Callable[P, device_pb2.GenerateRequest]:
    """MAKE, answering its GenerateParams as the proto request: one signature, not a copy of it."""

    def build(*args: P.args, **kwargs: P.kwargs) -> device_pb2.GenerateRequest:
        return make(*args, **kwargs).to_proto()

    build.__doc__ = "Build a GenerateRequest from plain Python values (`speculation`: auto, off or fast)."
    return build


build_request = _as_request(params_from)


def constrained(
    request: device_pb2.GenerateRequest, constraint: device_pb2.OutputConstraint | None
) -> device_pb2.GenerateRequest:
    """The request with `constraint` set (unchanged when None)."""
    if constraint is not None:
        request.constraint.CopyFrom(constraint)
    return request


def json_schema_constraint(schema: str) -> device_pb2.OutputConstraint:
    """An OutputConstraint: the output is JSON valid against this JSON Schema (its text)."""
    return device_pb2.OutputConstraint(json_schema=schema)
