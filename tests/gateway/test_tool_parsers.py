"""Tool calls read back from each family's own syntax (outputs as those models write them)."""

from __future__ import annotations

import json

import pytest

from edgellm.gateway.tools.parsers import FORMATS, parse_calls

NAMES = frozenset({"get_weather", "get_time"})


def _calls(text: str) -> list[tuple[str, dict[str, object]]]:
    return [(c.name, json.loads(c.arguments)) for c in parse_calls(text, NAMES).calls]


def test_qwen_hermes_blocks_with_text_before_them() -> None:
    text = (
        "I'll check both for you.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Europe/Paris"}}\n</tool_call>'
    )
    parsed = parse_calls(text, NAMES)
    assert parsed.content == "I'll check both for you."
    assert _calls(text) == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}),
        ("get_time", {"timezone": "Europe/Paris"}),
    ]
    assert FORMATS["hermes"](text) is not None


def test_smollm2_writes_a_list_inside_one_block() -> None:
    text = '<tool_call>[{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "get_time", "arguments": {"timezone": "CET"}}]</tool_call>'  # noqa: E501
    assert FORMATS["hermes"](text) is None and FORMATS["smollm2"](text) is not None
    assert _calls(text) == [("get_weather", {"city": "Rome"}), ("get_time", {"timezone": "CET"})]
    assert parse_calls(text, NAMES).content is None


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "get_weather", "parameters": {"city": "Oslo"}}',
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}',
        ' {"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}',
    ],
)
def test_llama_3_1_json_answers(text: str) -> None:
    assert _calls(text) == [("get_weather", {"city": "Oslo"})]


def test_llama_3_2_separates_several_calls_with_semicolons() -> None:
    text = '{"name": "get_weather", "parameters": {"city": "Oslo"}}; {"name": "get_time", "parameters": {"timezone": "CET"}}'  # noqa: E501
    assert [name for name, _ in _calls(text)] == ["get_weather", "get_time"]


@pytest.mark.parametrize(
    "text",
    [
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Lima"}}]',
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Lima"}',
    ],
)
def test_mistral_tool_calls_old_and_v11(text: str) -> None:
    assert _calls(text) == [("get_weather", {"city": "Lima"})]


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is sunny.",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',  # cut short
        '<tool_call>\n{"name": "launch_rocket", "arguments": {}}\n</tool_call>',  # not offered
        '{"answer": 42}',  # JSON, but no call
        '<tool_call>\n{"name": "get_weather", "arguments": [1, 2]}\n</tool_call>',  # arguments not an object
    ],
)
def test_text_that_is_no_valid_call_stays_text(text: str) -> None:
    parsed = parse_calls(text, NAMES)
    assert parsed.calls == () and parsed.content == text


def test_each_call_gets_its_own_openai_id() -> None:
    text = '[TOOL_CALLS] [{"name": "get_time", "arguments": {}}, {"name": "get_time", "arguments": {}}]'
    ids = [c.id for c in parse_calls(text, NAMES).calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") and len(i) == 29 for i in ids)
