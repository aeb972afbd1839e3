"""Turn wire requests into validated core objects; every refusal says what to change."""

from __future__ import annotations

import math
import time
import uuid

from edgellm.common.errors import InvalidArgument
from edgellm.device.config import DaemonConfig
from edgellm.device.generation import GenerationJob
from edgellm.device.sampler import SamplingConfig
from edgellm.v1 import device_pb2

ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256


def sampling_from(p: device_pb2.SamplingParams) -> SamplingConfig:
    """Map SamplingParams (proto3 zeros mean 'off') to a SamplingConfig."""
    if math.isnan(p.temperature) or p.temperature < 0:
        raise InvalidArgument(f"sampling.temperature must be >= 0 (0 = greedy), got {p.temperature}")
    return SamplingConfig(
        temperature=float(p.temperature),
        top_k=int(p.top_k),
        top_p=float(p.top_p) if p.top_p > 0 else 1.0,
        min_p=float(p.min_p),
        repetition_penalty=float(p.repetition_penalty) if p.repetition_penalty != 0 else 1.0,
        presence_penalty=float(p.presence_penalty),
        frequency_penalty=float(p.frequency_penalty),
        logit_bias={int(k): float(v) for k, v in p.logit_bias.items()},
        seed=int(p.seed) if p.HasField("seed") else None,
    )


def job_from(req: device_pb2.GenerateRequest, config: DaemonConfig) -> GenerationJob:
    """Validate a GenerateRequest (everything knowable before tokenizing) into a job."""
    received = time.perf_counter()
    if req.prompt and req.messages:
        raise InvalidArgument("give either prompt (raw text) or messages (chat), not both")
    if not req.prompt and not req.messages:
        raise InvalidArgument("the request has no prompt: set prompt or messages")
    for i, m in enumerate(req.messages):
        if m.role not in ROLES:
            raise InvalidArgument(f"messages[{i}].role must be one of {sorted(ROLES)}, got {m.role!r}")
    if req.messages and req.messages[-1].role == "assistant":
        raise InvalidArgument("the last message must not be the assistant's: there is nothing to answer")
    cap = config.max_new_tokens_cap
    max_new = req.max_new_tokens
    if max_new == 0:
        raise InvalidArgument(f"max_new_tokens must be between 1 and this daemon's cap of {cap}")
    if max_new > cap:
        raise InvalidArgument(f"max_new_tokens {req.max_new_tokens} is above this daemon's cap of {cap}")
    if len(req.stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in req.stop):
        raise InvalidArgument(f"at most {MAX_STOP_STRINGS} stop strings of up to {MAX_STOP_CHARS} characters")
    return GenerationJob(
        request_id=req.request_id or uuid.uuid4().hex,
        prompt=req.prompt or None,
        messages=tuple((m.role, m.content) for m in req.messages),
        max_new_tokens=max_new,
        sampling=sampling_from(req.sampling),
        stop=tuple(s for s in req.stop if s),
        session_id=req.session_id,
        kv_window=req.kv_window,
        n_keep=req.n_keep,
        received_at=received,
    )
