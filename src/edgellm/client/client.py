"""A small synchronous Python client for the device daemon."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import ParamSpec

import grpc

from edgellm.client.params import SPECULATION, Constraint, GenerateParams, SpeculationName
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

    def generate(
        self,
        prompt: str | None = None,
        messages: Sequence[tuple[str, str]] | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        session_id: str = "",
        speculation: SpeculationName = "auto",
        *,
        constraint: device_pb2.OutputConstraint | None = None,
        **sampling: float,
    ) -> Completion:
        """Run a whole generation and collect it (within `constraint` when given)."""
        params = params_from(
            prompt, messages, max_new_tokens, temperature, seed, stop, session_id, speculation, **sampling
        )
        if constraint is not None:
            params = replace(params, constraint=Constraint.from_proto(constraint))
        return self.complete(params)

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


def params_from(
    prompt: str | None = None,
    messages: Sequence[tuple[str, str]] | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed: int | None = None,
    stop: Sequence[str] = (),
    session_id: str = "",
    speculation: SpeculationName = "auto",
    **sampling: float,
) -> GenerateParams:
    """GenerateParams from plain Python values (`sampling`: top_k, top_p, min_p and the penalties)."""
    return GenerateParams(
        prompt=prompt or "",
        messages=tuple((r, c) for r, c in (messages or ())),
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
        stop=tuple(stop),
        session_id=session_id,
        speculation=speculation,
        **sampling,  # type: ignore[arg-type]
    )


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
