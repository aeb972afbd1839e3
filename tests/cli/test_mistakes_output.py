"""Wrong invocations a newcomer makes (issue 32, items 1-6), each checked three ways: no traceback,
a message that names the fix, and the exit status docs/cli.md documents for it.

Real servers: the default model's daemon and a host service on free ports (tests/cli/conftest.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edgellm.cli import build_parser
from edgellm.client.commands.telemetry import PLOT_SAMPLES, sample_limit
from edgellm.common.errors import InvalidArgument
from edgellm.common.targets import with_port
from edgellm.device.rpc.server import RunningDaemon
from edgellm.host.server import RunningHost
from tests.cli.conftest import Result, free_port

FRANCE = "What is the capital of France?"
BAD_INPUT, FAILED = 2, 1


def said(r: Result, code: int, *fix: str) -> None:
    """The run exited CODE without a traceback, and stderr names every part of FIX."""
    assert r.code == code, (r.code, r.out, r.err)
    assert "Traceback" not in r.err, r.err
    assert all(part in r.err for part in fix), (fix, r.err)


# -- item 1: a chat-tuned model answers a plain `generate`; an empty answer is never silent ----------


def test_generate_without_chat_answers_through_the_chat_template_of_a_chat_tuned_model(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    r = edgellm("generate", "--target", target, "--temperature", "0", FRANCE)
    assert r.code == 0 and "Paris" in r.out, (r.out, r.err)
    # Scripts that pass --chat keep working, with the same answer.
    chat = edgellm("generate", "--target", target, "--chat", "--temperature", "0", FRANCE)
    assert chat.code == 0 and chat.out == r.out


def test_an_empty_raw_answer_says_why_and_what_to_pass_and_fails(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    target = f"127.0.0.1:{model_daemon.port}"
    for flag in ("--raw", "--no-chat"):
        r = edgellm("generate", "--target", target, flag, "--temperature", "0", FRANCE)
        said(r, FAILED, "0 tokens", "chat-tuned", "drop --raw")
        assert r.out == ""  # nothing, not an empty line, on stdout
    # A raw completion the model continues is still one: "--raw" is for that.
    r = edgellm("generate", "--target", target, "--raw", "--max-new-tokens", "4", "The capital of France is")
    assert r.code == 0 and r.out.strip(), r.err


def test_raw_and_a_system_message_contradict_each_other(edgellm: Callable[..., Result]) -> None:
    target = f"127.0.0.1:{free_port()}"
    said(
        edgellm("generate", "--target", target, "--raw", "--system", "Be brief.", "hi"),
        BAD_INPUT,
        "drop --raw",
    )
    usage = edgellm("generate", "--target", target, "--raw", "--chat", "hi")
    assert usage.code == BAD_INPUT and "not allowed with argument" in usage.err


# -- item 3: the other service's port ----------------------------------------------------------------


def test_a_daemon_command_at_the_host_services_port_says_which_service_answered(
    host_service: RunningHost, edgellm: Callable[..., Result]
) -> None:
    r = edgellm("status", "--target", f"127.0.0.1:{host_service.port}")
    said(r, BAD_INPUT, "is edgellm's host service, not a daemon", "edgellm jobs")
    assert "UNIMPLEMENTED" not in r.err


def test_a_jobs_command_at_the_daemons_port_says_which_service_answered(
    model_daemon: RunningDaemon, edgellm: Callable[..., Result]
) -> None:
    r = edgellm("jobs", "artifacts", "--target", f"127.0.0.1:{model_daemon.port}")
    said(r, BAD_INPUT, "is an edgellm daemon, not the host service", "edgellm host")
    assert "UNIMPLEMENTED" not in r.err


# -- item 4: telemetry --plot ------------------------------------------------------------------------


def test_a_plot_file_type_matplotlib_cannot_write_is_refused_before_sampling(
    edgellm: Callable[..., Result], tmp_path: Path
) -> None:
    # Nothing listens on the target: the type is checked before any connection is tried.
    r = edgellm("telemetry", "--target", f"127.0.0.1:{free_port()}", "--plot", str(tmp_path / "x.txt"))
    said(r, BAD_INPUT, "cannot write .txt", ".png")
    assert not (tmp_path / "x.txt").exists()


def test_a_plot_name_without_a_suffix_reports_the_png_it_writes(
    bare_daemon_factory: Callable[..., RunningDaemon], edgellm: Callable[..., Result], tmp_path: Path
) -> None:
    daemon = bare_daemon_factory()
    name = tmp_path / "name"
    r = edgellm(
        "telemetry", "--target", f"127.0.0.1:{daemon.port}", "--plot", str(name), "--samples", "2",
        "--interval-ms", "50",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert f"wrote {name}.png" in r.out and Path(f"{name}.png").stat().st_size > 1000
    assert not name.exists()
    # It says that it samples, how many and how to stop early, on stderr even into a pipe.
    assert "sampling" in r.err and "2 samples every 50 ms" in r.err and "Ctrl-C" in r.err


def test_plot_alone_stops_at_a_bounded_default_and_explicit_counts_win() -> None:
    parser = build_parser()

    def limit(*argv: str) -> int:
        return sample_limit(parser.parse_args(["telemetry", *argv]))

    assert limit("--plot", "t.png") == PLOT_SAMPLES
    assert limit("--plot", "t.png", "--samples", "5") == 5
    assert limit("--plot", "t.png", "--samples", "0") == 0  # asked for: until Ctrl-C
    assert limit("--record", "t.jsonl", "--plot", "t.png") == 0  # a recording runs until Ctrl-C
    assert limit("--watch") == 0 and limit() == 1 and limit("--json", "--samples", "3") == 3


# -- item 6: addresses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "fix"),
    [
        ("http://127.0.0.1:50051", "give 127.0.0.1:50051"),
        ("https://phone.local:50051/", "give phone.local:50051"),
        ("grpc://127.0.0.1", "give 127.0.0.1:50051"),
        ("127.0.0.1:99999", "bad port '99999'"),
        ("127.0.0.1:http", "bad port 'http'"),
        ("[::1]:0", "bad port '0'"),
    ],
)
def test_a_url_or_a_bad_port_is_bad_input_that_names_the_address_to_give(
    edgellm: Callable[..., Result], target: str, fix: str
) -> None:
    said(edgellm("status", "--target", target), BAD_INPUT, fix)
    said(edgellm("jobs", "artifacts", "--target", target), BAD_INPUT)


def test_the_environment_target_is_checked_like_the_option(
    edgellm: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGELLM_TARGET", "http://127.0.0.1:50051")
    said(edgellm("generate", "hi"), BAD_INPUT, "is a URL", "give 127.0.0.1:50051")


def test_targets_that_were_valid_stay_valid() -> None:
    assert with_port("localhost") == "localhost:50051"
    assert with_port("[::1]:7") == "[::1]:7" and with_port("::1") == "[::1]:50051"
    assert (
        with_port("dns:///phone:50051") == "dns:///phone:50051" and with_port("unix:/tmp/s") == "unix:/tmp/s"
    )
    with pytest.raises(InvalidArgument, match="1 to 65535"):
        with_port("h:65536")


# -- item 10: Ctrl-C during generate -----------------------------------------------------------------


def test_ctrl_c_during_generate_ends_the_line_says_how_far_it_got_and_exits_130(
    model_daemon: RunningDaemon,
) -> None:
    """A real SIGINT to a real `edgellm generate` process while tokens stream (as a terminal sends it)."""
    target = f"127.0.0.1:{model_daemon.port}"
    argv = ["--log-level", "WARNING", "generate", "--target", target, "--temperature", "0"]
    prompt = "Write a long story about a dragon who learns to bake bread, with many chapters."
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgellm.cli", *argv, "--max-new-tokens", "2000", prompt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Why: a shell without job control starts background jobs with SIGINT ignored, and the
        # child would inherit that (Python then installs no KeyboardInterrupt handler): a CI
        # harness run with `&` saw exit 0. A terminal's foreground process has the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    streamed = b""
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while len(streamed) < 40 and time.monotonic() < deadline:  # a few words of the answer, then Ctrl-C
        chunk = os.read(proc.stdout.fileno(), 256)
        if not chunk:
            break
        streamed += chunk
    assert len(streamed) >= 40, (streamed, proc.stderr.read() if proc.stderr else b"")
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    out = (streamed + rest).decode()
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert out.endswith("\n") and not out.endswith("\n\n"), out  # the answer's line ended, once
    stderr = err.decode()
    assert "Traceback" not in stderr, stderr
    note = re.search(r"\[interrupted\] after (\d+) tokens", stderr)
    assert note is not None and int(note.group(1)) > 0, stderr
