"""Constrained output over a real gRPC server with the fake engine: refusals, masks, early stop, CLI.

The fake engine's script wants " The capital of France is Paris."; a constraint must override it,
and generation must end the moment the grammar is complete, not when the script does.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from asyncio.subprocess import PIPE
from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest

from edgellm.common.errors import InvalidArgument
from edgellm.device.rpc.server import RunningDaemon
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.fakes.fake_artifact import PIECES, write_fake_artifact
from tests.rpc.conftest import StartFake, channel_to

OutputConstraint = device_pb2.OutputConstraint


@pytest.fixture(scope="module")
def tokenizer_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake artifact with tokenizer.json, as artifacts built for constrained output carry."""
    return write_fake_artifact(tmp_path_factory.mktemp("fake-hf-tokenizer"), hf_tokenizer=True)


def request(
    constraint: OutputConstraint, sampling: device_pb2.SamplingParams | None = None
) -> device_pb2.GenerateRequest:
    return device_pb2.GenerateRequest(
        prompt="Where?", max_new_tokens=40, constraint=constraint, sampling=sampling
    )


async def run(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, req: device_pb2.GenerateRequest
) -> tuple[str, device_pb2.GenerateResponse]:
    responses = [r async for r in stub.Generate(req)]
    return "".join(r.text for r in responses), responses[-1]


async def sampled_answers(
    running: RunningDaemon, schema: Mapping[str, object], seeds: int = 8
) -> list[tuple[str, device_pb2.GenerateResponse]]:
    """One answer per seed at temperature 1 under a JSON-schema constraint (200-token budget)."""
    answers = []
    async with channel_to(running) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        for seed in range(seeds):
            sampling = device_pb2.SamplingParams(temperature=1.0, seed=seed)
            req = request(OutputConstraint(json_schema=json.dumps(schema)), sampling=sampling)
            req.max_new_tokens = 200
            answers.append(await run(stub, req))
    return answers


async def refusal(
    stub: device_pb2_grpc.DeviceDaemonAsyncStub, req: device_pb2.GenerateRequest
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await run(stub, req)
    return info.value


async def test_without_llguidance_a_constrained_request_is_refused_not_answered(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llguidance", None)  # hides the library: `import` raises ImportError
    err = await refusal(fake_stub, request(OutputConstraint(json_object=True)))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "pip install llguidance" in (err.details() or "")
    # Free text still works without it.
    text, last = await run(fake_stub, device_pb2.GenerateRequest(prompt="Where?", max_new_tokens=40))
    assert "Paris" in text and last.stats.constraint_ms == 0


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        (OutputConstraint(), "constraint is set but empty"),
        (OutputConstraint(json_object=False), "json_object must be true"),
        (OutputConstraint(json_schema=""), "constraint.json_schema is empty"),
        (OutputConstraint(json_schema="{not json"), "constraint.json_schema is not valid JSON"),
        (OutputConstraint(json_schema="[1, 2]"), "must be a JSON object"),
        (OutputConstraint(json_schema='{"type": "colour"}'), "colour"),
        (OutputConstraint(regex="a(b"), "unclosed group"),
        (OutputConstraint(lark_grammar="start: nowhere"), "unknown name"),
    ],
)
async def test_a_bad_constraint_is_invalid_argument_with_the_library_message(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub, constraint: OutputConstraint, message: str
) -> None:
    # The session's fake artifact has no tokenizer.json: the request is judged before the model.
    err = await refusal(fake_stub, request(constraint))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.details() or "")


async def test_an_artifact_without_tokenizer_json_is_refused_with_failed_precondition(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub,
) -> None:
    err = await refusal(fake_stub, request(OutputConstraint(json_object=True)))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = err.details() or ""
    assert "carries no tokenizer.json" in details and "rebuild it" in details


async def test_the_constraint_overrides_the_model_and_generation_stops_when_the_grammar_is_complete(
    start_fake: StartFake, tokenizer_artifact: Path
) -> None:
    running = await start_fake(model=tokenizer_artifact, endless=True)
    async with channel_to(running) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        schema = json.dumps({"enum": ["Paris", "Rome"]})
        text, last = await run(stub, request(OutputConstraint(json_schema=schema)))
        assert json.loads(text) in ("Paris", "Rome")
        assert last.finish_reason == device_pb2.FINISH_REASON_STOP
        assert last.stats.completion_tokens == len(text.encode())  # one byte token each, nothing after
        assert last.stats.constraint_ms > 0
        text, last = await run(stub, request(OutputConstraint(regex=r"[0-9]{3}")))
        assert re.fullmatch(r"[0-9]{3}", text) and last.finish_reason == device_pb2.FINISH_REASON_STOP


async def test_sampled_answers_all_match_the_constraint(
    start_fake: StartFake, tokenizer_artifact: Path
) -> None:
    running = await start_fake(model=tokenizer_artifact, endless=True)
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 7}, "ok": {"type": "boolean"}},
        "required": ["n", "ok"],
        "additionalProperties": False,
    }
    for text, last in await sampled_answers(running, schema):
        value = json.loads(text)
        assert set(value) == {"n", "ok"} and 3 <= value["n"] <= 7, text
        assert last.finish_reason == device_pb2.FINISH_REASON_STOP


async def test_an_object_schema_silent_about_other_keys_is_answered_with_its_own_keys_only(
    start_fake: StartFake, tokenizer_artifact: Path
) -> None:
    # The README's shape: no "additionalProperties". Open, the sampled fake model adds keys of its own
    # (and a real one adds them until max_new_tokens cuts the JSON); closed by default, it cannot.
    running = await start_fake(model=tokenizer_artifact, endless=True)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    for text, last in await sampled_answers(running, schema):
        assert set(json.loads(text)) == {"ok"}, text
        assert last.finish_reason == device_pb2.FINISH_REASON_STOP


async def test_logit_bias_that_removes_every_allowed_token_is_refused(
    start_fake: StartFake, tokenizer_artifact: Path
) -> None:
    running = await start_fake(model=tokenizer_artifact)
    digits = {PIECES.index(bytes([b])): float("-inf") for b in b"0123456789"}
    async with channel_to(running) as ch:
        stub = device_pb2_grpc.DeviceDaemonStub(ch)
        req = request(OutputConstraint(regex="[0-9]+"), sampling=device_pb2.SamplingParams(logit_bias=digits))
        err = await refusal(stub, req)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "logit_bias forbids every token the constraint allows" in (err.details() or "")


async def edgellm(*argv: str) -> tuple[int, str, str]:
    """Run the `edgellm` command in its own process, as a user would: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgellm.cli", *argv, stdout=PIPE, stderr=PIPE
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_edgellm_generate_json_schema_file(
    start_fake: StartFake, tokenizer_artifact: Path, tmp_path: Path
) -> None:
    running = await start_fake(model=tokenizer_artifact, endless=True)
    schema = tmp_path / "city.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"city": {"enum": ["Paris"]}},
                "required": ["city"],
                "additionalProperties": False,
            }
        )
    )
    target = ["--target", f"127.0.0.1:{running.port}", "--insecure-loopback"]  # the fake daemon: plaintext
    argv = ["generate", *target, "--json-schema", str(schema), "Where?"]
    code, out, err = await edgellm(*argv)
    assert code == 0, err
    assert json.loads(out) == {"city": "Paris"}
    assert err.startswith("[stop]")
    # A budget too small for the JSON: the cut answer is flagged on stderr and the status is 1.
    code, out, err = await edgellm(*argv[:-1], "--max-new-tokens", "3", "Where?")
    assert code == 1 and out.strip() and "[length]" in err
    assert "reached --max-new-tokens 3 before the JSON was complete" in err
    schema.write_text("{not json")
    code, _, err = await edgellm(*argv)
    assert code == 2 and "is not valid JSON" in err
    argv[argv.index(str(schema))] = str(tmp_path / "missing.json")
    code, _, err = await edgellm(*argv)
    assert code == 2 and "missing.json" in err


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        (
            OutputConstraint(regex="a" * (64 * 1024 + 1)),
            "constraint.regex is 65537 bytes; at most 65536 (64 KiB)",
        ),
        (
            OutputConstraint(lark_grammar="start: " + '"x" ' * 20_000),
            "constraint.lark_grammar is 80007 bytes; at most 65536",
        ),
        (
            OutputConstraint(json_schema='{"items": ' * 600 + "{}" + "}" * 600),
            "constraint.json_schema is nested more than 64 levels deep",
        ),
    ],
    ids=["regex-over-64k", "lark-over-64k", "schema-nested-600"],
)
async def test_l13_l2_constraint_text_over_64_kib_or_nested_600_deep_is_invalid_argument(
    fake_stub: device_pb2_grpc.DeviceDaemonAsyncStub, constraint: OutputConstraint, message: str
) -> None:
    """L13: the size cap names its limit (compile time grows with the text); L2: deep nesting was
    a RecursionError in close_objects, answered INTERNAL."""
    err = await refusal(fake_stub, request(constraint))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.details() or "")


def test_l13_llguidance_gets_explicit_parser_limits_and_they_bound_the_grammar() -> None:
    """L13: the limits are edgellm's own, not the installed llguidance's defaults, and they reach
    llguidance's checks: a grammar over a (test-lowered) size limit is refused naming it."""
    from edgellm.device.constrain.constraint import Constraint, ConstraintKind
    from edgellm.device.constrain.library import PARSER_LIMITS, compile_grammar, load_library, parser_limits

    lib = load_library()
    limits = parser_limits(lib)
    for name in ("max_grammar_size", "max_lexer_states", "initial_lexer_fuel", "step_max_items"):
        assert getattr(limits, name) == PARSER_LIMITS[name], name
    schema = Constraint(ConstraintKind.JSON_SCHEMA, json.dumps({"properties": {"a": {"type": "string"}}}))
    assert compile_grammar(lib, schema)  # within the shipped limits
    with pytest.raises(InvalidArgument) as err:
        compile_grammar(lib, schema, parser_limits(lib, max_grammar_size=5))
    assert "size" in str(err.value).lower()
