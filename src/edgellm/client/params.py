"""GenerateParams: one request's generation parameters, and the one mapping to and from the wire.

The CLI (`edgellm generate`, `chat`), the Python client (`build_request`, `DaemonClient.generate`)
and the gateway (`edgellm.gateway.params`) each build a GenerateParams from their own input and
send `to_proto()`. A new GenerateRequest field touches this type, the proto and the two mappings
below, and nothing else (vLLM keeps `to_sampling_params` in one place the same way).

Defaults are the wire's: proto3 zeros mean "off" (temperature 0 = greedy, top_p 0 = off,
repetition_penalty 0 = none), so a GenerateParams() sends what an empty request sends. The
client's recommended sampling values live in edgellm.client.sampling; callers pick them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from edgellm.v1 import common_pb2, device_pb2

__all__ = ["SPECULATION", "Constraint", "ConstraintKind", "GenerateParams", "SpeculationName"]

SpeculationName = Literal["auto", "off", "fast"]
SPECULATION: dict[str, device_pb2.Speculation.ValueType] = {
    "auto": device_pb2.SPECULATION_AUTO,
    "off": device_pb2.SPECULATION_OFF,
    "fast": device_pb2.SPECULATION_FAST,
}
_SPECULATION_NAME = {value: name for name, value in SPECULATION.items()}

ConstraintKind = Literal["json_schema", "json_object", "regex", "lark_grammar"]


@dataclass(frozen=True)
class Constraint:
    """An output constraint (OutputConstraint): its kind and text (the schema, pattern or grammar)."""

    kind: ConstraintKind
    text: str = ""  # empty for json_object

    def __post_init__(self) -> None:
        if self.kind not in get_args(ConstraintKind):
            raise ValueError(f"unknown constraint kind {self.kind!r}")

    def to_proto(self) -> device_pb2.OutputConstraint:
        """The OutputConstraint message."""
        message = device_pb2.OutputConstraint()
        if self.kind == "json_object":
            message.json_object = True
        else:
            setattr(message, self.kind, self.text)
        return message

    @classmethod
    def from_proto(cls, message: device_pb2.OutputConstraint) -> Constraint | None:
        """The constraint a message asks for (None when none of its kinds is set)."""
        kind = message.WhichOneof("kind")
        if kind is None:
            return None
        return cls(kind, "" if kind == "json_object" else getattr(message, kind))


@dataclass(frozen=True)
class GenerateParams:
    """Every field of a GenerateRequest, as plain immutable Python values."""

    prompt: str = ""
    messages: tuple[tuple[str, str], ...] = ()  # (role, content); chat template applied on the device
    max_new_tokens: int = 256
    # SamplingParams
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 0.0
    min_p: float = 0.0
    repetition_penalty: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias)
    seed: int | None = None  # None = random
    stop: tuple[str, ...] = ()
    session_id: str = ""
    model: str = ""
    request_id: str = ""
    kv_window: int = 0
    n_keep: int = 0
    constraint: Constraint | None = None
    speculation: SpeculationName = "auto"
    logprobs: bool = False  # each generated token's logprob (docs/gateway.md, "Logprobs")
    top_logprobs: int = 0  # 0..20 alternatives per position
    prompt_logprobs: bool = False  # every prompt token's logprob, from one all-positions prefill
    prompt_token_ids: tuple[int, ...] = ()  # the prompt as token ids (instead of prompt/messages)

    @classmethod
    def of(cls, base: GenerateParams | None = None, /, **values: Any) -> GenerateParams:
        """BASE (default: the wire's defaults) with VALUES changed, given as plain Python.

        Lists become tuples, a logit_bias dict its sorted items, an OutputConstraint message a
        Constraint and a None prompt or messages empty; a name that is no field is a TypeError.
        """
        start = cls() if base is None else base
        return replace(start, **{name: _frozen(name, value) for name, value in values.items()})

    def sampling(self) -> dict[str, Any]:
        """The SamplingParams fields but the seed and logit_bias, as keyword arguments for `of`."""
        return {name: getattr(self, name) for name in _SCALAR_SAMPLING}

    def to_proto(self) -> device_pb2.GenerateRequest:
        """The GenerateRequest to send."""
        sampling = device_pb2.SamplingParams(**self.sampling(), logit_bias=dict(self.logit_bias))
        if self.seed is not None:
            sampling.seed = self.seed
        request = device_pb2.GenerateRequest(
            prompt=self.prompt,
            messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in self.messages],
            max_new_tokens=self.max_new_tokens,
            sampling=sampling,
            stop=list(self.stop),
            session_id=self.session_id,
            model=self.model,
            request_id=self.request_id,
            kv_window=self.kv_window,
            n_keep=self.n_keep,
            speculation=SPECULATION[self.speculation],
            logprobs=self.logprobs,
            top_logprobs=self.top_logprobs,
            prompt_logprobs=self.prompt_logprobs,
            prompt_token_ids=list(self.prompt_token_ids),
        )
        if self.constraint is not None:
            request.constraint.CopyFrom(self.constraint.to_proto())
        return request

    @classmethod
    def from_proto(cls, request: device_pb2.GenerateRequest) -> GenerateParams:
        """What a GenerateRequest carries (SPECULATION_UNSPECIFIED reads as auto, as on the daemon)."""
        s = request.sampling
        return cls(
            prompt=request.prompt,
            messages=tuple((m.role, m.content) for m in request.messages),
            max_new_tokens=request.max_new_tokens,
            **{name: getattr(s, name) for name in _SCALAR_SAMPLING},
            logit_bias=tuple(sorted(s.logit_bias.items())),
            seed=s.seed if s.HasField("seed") else None,
            stop=tuple(request.stop),
            session_id=request.session_id,
            model=request.model,
            request_id=request.request_id,
            kv_window=request.kv_window,
            n_keep=request.n_keep,
            constraint=Constraint.from_proto(request.constraint),
            speculation=_SPECULATION_NAME.get(request.speculation, "auto"),  # type: ignore[arg-type]
            logprobs=request.logprobs,
            top_logprobs=request.top_logprobs,
            prompt_logprobs=request.prompt_logprobs,
            prompt_token_ids=tuple(request.prompt_token_ids),
        )


_SCALAR_SAMPLING = tuple(
    f.name for f in device_pb2.SamplingParams.DESCRIPTOR.fields if f.name not in ("seed", "logit_bias")
)


def _frozen(name: str, value: Any) -> Any:
    """VALUE as GenerateParams holds field NAME (immutable; see GenerateParams.of)."""
    if name in ("prompt", "messages") and value is None:
        return "" if name == "prompt" else ()
    if name == "messages":
        return tuple((role, content) for role, content in value)
    if name in ("stop", "prompt_token_ids"):
        return tuple(value)
    if name == "logit_bias":
        return tuple(sorted(value.items())) if isinstance(value, Mapping) else tuple(value)
    if isinstance(value, device_pb2.OutputConstraint):
        return Constraint.from_proto(value)
    return value
