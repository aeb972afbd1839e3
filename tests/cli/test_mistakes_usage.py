"""The mistakes people make (issue 32, items 7-9, 11): each ends in no traceback, a message that
names the fix, and the exit status docs/cli.md documents (2 bad input, 1 refused)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from edgellm.device.rpc.server import RunningDaemon
from edgellm.host.server import RunningHost
from tests.cli.conftest import Result

BAD_INPUT, FAILED = 2, 1


def _clean(r: Result, code: int, *words: str) -> None:
    """Exit CODE, no traceback, every WORD in stderr, and no gRPC code name standing in for words."""
    assert r.code == code, (r.code, r.err)
    assert "Traceback" not in r.err, r.err
    assert all(w in r.err for w in words), (words, r.err)
    assert not any(name in r.err for name in ("INVALID_ARGUMENT", "NOT_FOUND", "UNAUTHENTICATED")), r.err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        # The subcommand's own usage and the option meant, not `edgellm [-h] ... COMMAND`.
        (["status", "--jsno"], ("usage: edgellm status", "did you mean '--json'?")),
        (["genrate", "hi"], ("did you mean 'generate'?",)),
        (["config", "sett", "x=1"], ("usage: edgellm config", "did you mean 'set'?")),
        (["jobs", "lst"], ("did you mean 'list'?",)),
        (["jobs", "scan", "default", "--backend", "opencll"], ("did you mean 'opencl'?",)),
        (["generate", "--chat", ""], ("the prompt is empty",)),
        (["generate"], ("no prompt: pass it as an argument",)),
        (["config", "set", "kv_window=-5"], ("kv_window must be 0 or at least 64, got -5",)),
        (["config", "set", "kv_window=5"], ("kv_window must be 0 or at least 64",)),
        (["config", "set", "threads=0"], ("threads must be at least 1",)),
        (["config", "set", "policy=turbo"], ("policy must be one of thermal, off, pinned, got 'turbo'",)),
        (["config", "set", "polcy=off"], ("did you mean policy=off?",)),
    ],
)
def test_a_wrong_invocation_says_what_to_type_instead(
    argv: list[str], words: tuple[str, ...], edgellm: Callable[..., Result]
) -> None:
    _clean(edgellm(*argv), BAD_INPUT, *words)


def test_an_empty_prompt_from_stdin_is_refused_before_the_daemon_sees_it(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    for stdin in ("", "\n", "  \n"):
        r = edgellm("generate", "--chat", "--target", target, "-", stdin=stdin)
        _clean(r, BAD_INPUT, "the prompt is empty", "stdin")
        assert r.out == ""  # the model did not ramble


def test_a_wrong_edgellm_token_is_said_to_override_the_token_files(
    bare_daemon_factory: Callable[..., RunningDaemon],
    edgellm: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = f"127.0.0.1:{bare_daemon_factory().port}"
    assert edgellm("status", "--target", target).code == 0  # the token file the daemon wrote works
    monkeypatch.setenv("EDGELLM_TOKEN", "not-the-token")
    r = edgellm("status", "--target", target)
    _clean(r, FAILED, "$EDGELLM_TOKEN overrides the token files", "unset EDGELLM_TOKEN")


def test_service_refusals_are_worded_without_grpc_code_names_unless_debugging(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    r = edgellm("generate", "--target", target, "--max-new-tokens", "100000", "hi")
    _clean(r, BAD_INPUT, "max_new_tokens 100000 is above this daemon's cap")
    debug = edgellm(
        "--log-level", "DEBUG", "generate", "--target", target, "--max-new-tokens", "100000", "hi"
    )
    assert debug.code == BAD_INPUT and "[INVALID_ARGUMENT]" in debug.err


def test_a_failed_host_job_is_worded_without_its_code_name(
    host_service: RunningHost, edgellm: Callable[..., Result]
) -> None:
    r = edgellm("jobs", "scan", "/nonexistent", "--target", f"127.0.0.1:{host_service.port}")
    _clean(r, BAD_INPUT, "no llm.mnn at '/nonexistent'")
