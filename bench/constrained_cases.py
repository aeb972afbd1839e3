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
