"""Constrained output with the real model over gRPC: sampled answers parse and validate.

The short version of bench/bench_constrained.py (50 answers per split): one sampled answer
(temperature 0.8) per schema, for the five schemas the prompt was written against and for the
five held-out ones nothing was tuned on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.constrained_cases import Case, ask, cases
from edgellm.device.constrain.library import GrammarTokenizer, load_library
from edgellm.engine.artifact import open_artifact
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc

ALL = [pytest.param(c, id=f"{split}-{c.name}") for split in ("tuning", "held_out") for c in cases(split)]


def test_the_artifact_carries_a_tokenizer_json_that_agrees_with_its_token_table(
    default_artifact: Path,
) -> None:
    artifact = open_artifact(default_artifact)
    assert artifact.manifest.tokenizer.hf_tokenizer == "tokenizer.json"
    # open() compares llguidance's bytes for every token id with tokens.bin and refuses a mismatch.
    tokenizer = GrammarTokenizer.open(load_library(), artifact)
    assert tokenizer.vocab_size == artifact.manifest.model.vocab_size


@pytest.mark.parametrize("case", ALL)
async def test_a_sampled_answer_parses_and_validates(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub, case: Case
) -> None:
    answer = await ask(daemon_stub, case, seed=1)
    case.check(answer.text)  # raises on invalid JSON or a schema violation
    assert answer.finish_reason == device_pb2.FINISH_REASON_STOP  # the grammar completed
    assert answer.constraint_ms > 0


async def test_regex_and_json_object_with_the_real_model(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    async def run(constraint: device_pb2.OutputConstraint, question: str) -> str:
        req = device_pb2.GenerateRequest(
            messages=[common_pb2.ChatMessage(role="user", content=question)],
            max_new_tokens=96,
            constraint=constraint,
        )
        return "".join([r.text async for r in daemon_stub.Generate(req)])

    date = await run(device_pb2.OutputConstraint(regex=r"\d{4}-\d{2}-\d{2}"), "When did World War II end?")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)
    obj = await run(
        device_pb2.OutputConstraint(json_object=True),
        'What is the capital of France? Answer as a JSON object with one key, "city".',
    )
    assert isinstance(json.loads(obj), dict)


async def test_speculation_auto_with_a_constraint_decodes_plainly_and_validates(
    daemon_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    # A draft is verified against the model only, never the grammar: a constrained request does
    # not draft even when it asks for speculation (docs/constrained.md).
    case = cases("tuning")[0]
    request = device_pb2.GenerateRequest(
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in case.messages()],
        max_new_tokens=160,
        constraint=device_pb2.OutputConstraint(json_schema=case.schema_text),
        speculation=device_pb2.SPECULATION_AUTO,
    )
    responses = [r async for r in daemon_stub.Generate(request)]
    case.check("".join(r.text for r in responses))
    stats = responses[-1].stats
    assert responses[-1].finish_reason == device_pb2.FINISH_REASON_STOP
    assert stats.draft_tokens == 0 and stats.constraint_ms > 0
