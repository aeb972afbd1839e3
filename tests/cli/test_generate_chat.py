"""`edgellm generate` and `edgellm chat` with the bundled model: default answers, input from files
and stdin, multi-line chat, exit statuses (against a real daemon with the real model)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from edgellm.client.commands.chat import messages
from edgellm.common.paths import data_dir
from edgellm.device.rpc.server import RunningDaemon
from tests.cli.conftest import Result, free_port

FRANCE = "What is the capital of France?"
POEM = "Write a short poem about the sea."
SAMPLING = {"default": ["--seed", "1"], "greedy": ["--temperature", "0"]}


def lines_repeat(text: str) -> bool:
    lines = [ln.strip().lower() for ln in text.splitlines() if ln.strip()]
    return len(lines) != len(set(lines))


@pytest.mark.parametrize("sampling", ["default", "greedy"])
def test_generate_chat_with_the_defaults_answers_paris_and_writes_a_poem_without_loops(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result], sampling: str
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    r = edgellm("generate", "--target", target, "--chat", *SAMPLING[sampling], FRANCE)
    assert r.code == 0 and "Paris" in r.out, r
    r = edgellm(
        "generate", "--target", target, "--chat", *SAMPLING[sampling], "--max-new-tokens", "160", POEM
    )
    assert r.code == 0 and r.out.strip() and not lines_repeat(r.out), r.out


@pytest.mark.parametrize("sampling", ["default", "greedy"])
def test_chat_with_the_defaults_answers_paris_and_writes_a_poem_without_loops(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result], sampling: str
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    r = edgellm(
        "chat",
        "--target",
        target,
        *SAMPLING[sampling],
        "--max-new-tokens",
        "160",
        stdin=f"{FRANCE}\n/reset\n{POEM}\n",
    )
    assert r.code == 0, r
    first, second = r.out.split("bot> ")[1:]
    assert "Paris" in first and not lines_repeat(second), r.out


def test_no_system_prompt_is_sent_unless_asked(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    from edgellm.cli import build_parser
    from edgellm.client.commands.common_args import params_from_args

    for command in ("chat", "generate"):
        ns = build_parser().parse_args([command, "x"] if command == "generate" else [command])
        assert ns.system is None  # the chat template's own system prompt applies
        sent = params_from_args(ns)
        assert sent.frequency_penalty > 0 and sent.repetition_penalty == 1.0
        assert 0 < sent.temperature < 1 and sent.top_p < 1


def test_the_prompt_comes_from_stdin_or_a_file(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result], tmp_path: Path
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    r = edgellm(
        "generate", "--target", target, "--chat", "--seed", "1", "-", stdin=FRANCE + "\n"
    )  # as `echo` sends it
    assert r.code == 0 and "Paris" in r.out, r
    question = tmp_path / "q.txt"
    question.write_text(FRANCE + "\n", encoding="utf-8")
    r = edgellm("generate", "--target", target, "--chat", "--seed", "1", "--prompt-file", str(question))
    assert r.code == 0 and "Paris" in r.out, r
    r = edgellm("generate", "--target", target, "--prompt-file", str(question), "also this")
    assert r.code == 2 and "not both" in r.err
    r = edgellm("generate", "--target", target)
    assert r.code == 2 and "--prompt-file" in r.err


def test_a_200_kb_prompt_reaches_the_daemon_whole_and_the_refusal_says_what_to_do(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result], tmp_path: Path
) -> None:
    text = (data_dir() / "wikitext2-valid.txt").read_text(encoding="utf-8")[:200_000]
    big = tmp_path / "big.txt"
    big.write_text(text, encoding="utf-8")
    target = f"127.0.0.1:{model_daemon.port}"
    by_file = edgellm("generate", "--target", target, "--prompt-file", str(big), "--max-new-tokens", "4")
    by_stdin = edgellm("generate", "--target", target, "-", "--max-new-tokens", "4", stdin=text)
    for r in (by_file, by_stdin):
        assert r.code == 2 and "prompt is" in r.err and "--kv-window" in r.err, r.err
    # The daemon tokenized all 200 KB (about 4 characters a token), through gRPC either way.
    count = int(by_file.err.split("prompt is ")[1].split(" tokens")[0])
    assert count > 40_000 and f"prompt is {count} tokens" in by_stdin.err


@pytest.mark.slow
def test_a_200_kb_prompt_slides_through_a_window(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result], tmp_path: Path
) -> None:
    big = tmp_path / "big.txt"
    big.write_text(
        (data_dir() / "wikitext2-valid.txt").read_text(encoding="utf-8")[:200_000], encoding="utf-8"
    )
    target = f"127.0.0.1:{model_daemon.port}"
    r = edgellm(
        "generate",
        "--target",
        target,
        "--prompt-file",
        str(big),
        "--kv-window",
        "4096",
        "--max-new-tokens",
        "8",
    )
    assert r.code == 0 and "[length]" in r.err, r.err


def test_a_triple_quoted_block_is_one_chat_message() -> None:
    text = 'hello\n\n"""\nline one\n  line two\n"""\n"""inline"""\n"""start\nend"""\n"""\nunterminated\n'
    assert list(messages(io.StringIO(text))) == [
        "hello",
        "line one\n  line two",
        "inline",
        "start\nend",
        "unterminated",
    ]


def test_chat_sends_a_pasted_block_as_one_turn(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    block = f'"""\nI am planning a trip.\n{FRANCE}\n"""\n'
    r = edgellm("chat", "--target", target, "--temperature", "0", stdin=block)
    assert r.code == 0 and r.out.count("bot> ") == 1 and "Paris" in r.out, r.out


def test_chat_exits_non_zero_when_every_turn_failed(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    r = edgellm("chat", "--target", f"127.0.0.1:{free_port()}", stdin="hi\nthere\n")
    assert r.code == 3 and r.err.count("cannot reach the daemon") == 2
    target = f"127.0.0.1:{model_daemon.port}"
    r = edgellm("chat", "--target", target, "--max-new-tokens", "100000", stdin="hi\n")  # above the cap
    assert r.code == 2 and "cap" in r.err and "INVALID_ARGUMENT" not in r.err
    r = edgellm("chat", "--target", target, "--max-new-tokens", "8", stdin="hi\n")
    assert r.code == 0 and "bot> " in r.out
