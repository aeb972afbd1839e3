"""Check wire requests before they reach the core; every refusal says what to change.

Only what is knowable without the engine is checked here. The worker thread checks the rest,
because it needs the loaded model: the prompt's length against the context
(`generation.render_prompt`), logit-bias ids against the vocabulary (`SamplingConfig.validate`)
and a per-request window against the context (`scheduler.request_policy`).
"""

from __future__ import annotations

import math
import time

from edgellm.common.errors import InvalidArgument
from edgellm.common.grpc_util import MAX_REQUEST_ID_CHARS
from edgellm.device.config import DaemonConfig
from edgellm.device.constrain import load_library
from edgellm.device.constrain.constraint import check_constraint_size
from edgellm.device.generation import GenerationJob
from edgellm.device.logprobs import MAX_TOP_LOGPROBS
from edgellm.device.rpc.wire import job_from
from edgellm.v1 import device_pb2

ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256


def check_id(name: str, value: str) -> None:
    """Ids are keys of live tables and go into every log line: cap their length (finding S14)."""
    if len(value) > MAX_REQUEST_ID_CHARS:
        raise InvalidArgument(f"{name} is {len(value)} characters; at most {MAX_REQUEST_ID_CHARS}")


def check_generate(req: device_pb2.GenerateRequest, config: DaemonConfig) -> None:
    """Raise InvalidArgument for a GenerateRequest the daemon cannot run."""
    check_id("request_id", req.request_id)
    check_id("session_id", req.session_id)
    check_prompt(req)
    cap = config.server.max_new_tokens_cap
    if req.max_new_tokens == 0 and not req.prompt_logprobs:
        raise InvalidArgument(
            f"max_new_tokens must be between 1 and this daemon's cap of {cap} "
            "(0 only with prompt_logprobs: scoring the prompt)"
        )
    if req.max_new_tokens > cap:
        raise InvalidArgument(f"max_new_tokens {req.max_new_tokens} is above this daemon's cap of {cap}")
    if len(req.stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in req.stop):
        raise InvalidArgument(f"at most {MAX_STOP_STRINGS} stop strings of up to {MAX_STOP_CHARS} characters")
    t = req.sampling.temperature
    if math.isnan(t) or t < 0:
        raise InvalidArgument(f"sampling.temperature must be >= 0 (0 = greedy), got {t}")
    if req.HasField("constraint"):
        check_constraint(req.constraint)
    check_logprobs(req)


def check_logprobs(req: device_pb2.GenerateRequest) -> None:
    """top_logprobs within 0..20, and only where something is scored."""
    if req.top_logprobs > MAX_TOP_LOGPROBS:
        raise InvalidArgument(
            f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {req.top_logprobs}"
        )
    if req.top_logprobs and not (req.logprobs or req.prompt_logprobs):
        raise InvalidArgument("top_logprobs needs logprobs or prompt_logprobs set")


def check_prompt(req: device_pb2.GenerateRequest) -> None:
    """Exactly one of prompt, messages and prompt_token_ids; known roles; a chat that ends with
    something to answer."""
    given = [bool(req.prompt), bool(req.messages), bool(req.prompt_token_ids)]
    if sum(given) > 1:
        raise InvalidArgument("give either prompt (raw text), messages (chat) or prompt_token_ids, not both")
    if not any(given):
        raise InvalidArgument("the request has no prompt: set prompt, messages or prompt_token_ids")
    for i, m in enumerate(req.messages):
        if m.role not in ROLES:
            raise InvalidArgument(f"messages[{i}].role must be one of {sorted(ROLES)}, got {m.role!r}")
    if req.messages and req.messages[-1].role == "assistant":
        raise InvalidArgument("the last message must not be the assistant's: there is nothing to answer")


def check_constraint(c: device_pb2.OutputConstraint) -> None:
    """A constraint names one kind, and this daemon has the library to enforce it.

    Never answer unconstrained when a constraint was asked for: without llguidance the request
    fails here with FAILED_PRECONDITION. The grammar itself is compiled on the worker thread
    (`TokenGuide.start`), where the loaded model's tokenizer is.
    """
    kind = c.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument(
            "constraint is set but empty: set json_schema, json_object, regex or lark_grammar"
        )
    if kind == "json_object" and not c.json_object:
        raise InvalidArgument("constraint.json_object must be true (leave constraint unset for free text)")
    if kind != "json_object":
        check_constraint_size(f"constraint.{kind}", str(getattr(c, kind)))
    load_library()


def generation_job(req: device_pb2.GenerateRequest, config: DaemonConfig, request_id: str) -> GenerationJob:
    """Check a GenerateRequest and map it to a job (timed from now: queue_ms starts here)."""
    received = time.perf_counter()
    check_generate(req, config)
    return job_from(req, request_id, received)
