"""The schema cases behind the constrained-output checks (tests/constrain and bench/bench_constrained.py).

`bench/schemas/tuning/` holds the five schemas the prompt was written against; `held_out/` holds
five more that nothing was tuned on (report them separately). Each file is {"task", "schema"}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).resolve().parent / "schemas"
SYSTEM = "You are a helpful assistant. Reply with one JSON object and nothing else."


@dataclass(frozen=True)
class Case:
    """One schema and the request that asks for it."""

    name: str
    task: str
    schema: dict[str, Any]

    @property
    def schema_text(self) -> str:
        """The schema as the request carries it."""
        return json.dumps(self.schema)

    def messages(self) -> list[tuple[str, str]]:
        """Chat messages: the task and the schema it must follow (the same template for every case)."""
        return [("system", SYSTEM), ("user", f"{self.task}\nUse this JSON schema:\n{self.schema_text}")]

    def check(self, text: str) -> dict[str, Any]:
        """Parse and validate an answer (raises json.JSONDecodeError or jsonschema.ValidationError)."""
        value = json.loads(text)
        jsonschema.Draft202012Validator(self.schema).validate(value)
        assert isinstance(value, dict)
        return value


def cases(split: str) -> list[Case]:
    """The cases of one split, "tuning" or "held_out", by name."""
    out = []
    for path in sorted((SCHEMAS / split).glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        jsonschema.Draft202012Validator.check_schema(doc["schema"])
        out.append(Case(path.stem, doc["task"], doc["schema"]))
    return out


@dataclass(frozen=True)
class Answer:
    """One constrained answer as the daemon streamed it."""

    case: str
    seed: int
    text: str
    token_ids: tuple[int, ...]
    finish_reason: int
    completion_tokens: int
    constraint_ms: float
    decode_tokens_per_second: float


TEMPERATURE = 0.8
MAX_NEW_TOKENS = 320


async def ask(stub: Any, case: Case, seed: int, temperature: float = TEMPERATURE) -> Answer:
    """Sample one answer to `case` from a daemon (a DeviceDaemon aio stub) under its JSON schema."""
    from edgellm.v1 import common_pb2, device_pb2

    request = device_pb2.GenerateRequest(
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in case.messages()],
        max_new_tokens=MAX_NEW_TOKENS,
        sampling=device_pb2.SamplingParams(temperature=temperature, seed=seed),
        constraint=device_pb2.OutputConstraint(json_schema=case.schema_text),
    )
    text, ids = "", []
    async for r in stub.Generate(request):
        text += r.text
        ids.extend(r.token_ids)
        last = r
    s = last.stats
    return Answer(
        case.name,
        seed,
        text,
        tuple(ids),
        last.finish_reason,
        s.completion_tokens,
        s.constraint_ms,
        s.decode_tokens_per_second,
    )
