"""Schema-constrained output on a deployed phone: install.sh tries llguidance and records the
outcome; `edgellm deploy device` says plainly whether constrained output is available and, if not,
what requests with a response_format or JSON schema will get."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgellm.deploy.device import deploy_device
from tests.deploy.conftest import Rig
from tests.deploy.test_termux_scripts import calls, run_install, termux

__all__ = ["termux"]  # the stub Termux fixture, shared with the installer's own tests

# A python that has llguidance only once pip installed it, and a pip that fails to build it when
# $FAIL_LLG is set (as pip in Termux does without a working Rust toolchain).
LLG_PYTHON = """#!/bin/sh
echo "python $*" >> "$CALLS"
case "$*" in
  "-c import llguidance") [ -f "$STUBS/llg-done" ] || exit 1 ;;
  "-c import MNN, MNN.llm") [ -f "$STUBS/mnn-done" ] || exit 1 ;;
  "setup.py install"*) touch "$STUBS/mnn-done" ;;
esac
exit 0
"""
LLG_PIP = """#!/bin/sh
echo "pip $*" >> "$CALLS"
case "$*" in
  *" llguidance>="*) [ -z "$FAIL_LLG" ] || { echo "error: can't find Rust compiler" >&2; exit 1; }
                touch "$STUBS/llg-done" ;;
esac
exit 0
"""


def without_llguidance(env: dict[str, str]) -> dict[str, str]:
    stubs = Path(env["STUBS"])
    for name, text in (("python", LLG_PYTHON), ("pip", LLG_PIP)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    return env


def recorded(env: dict[str, str]) -> str:
    return (Path(env["HOME"]) / ".edgellm" / "deploy" / "constrained").read_text()


def test_the_installer_builds_llguidance_after_the_rest_and_records_it(termux: dict[str, str]) -> None:
    env = without_llguidance(termux)
    r = run_install(env)
    assert r.returncode == 0, r.stdout + r.stderr
    pips = [c for c in calls(env) if c.startswith("pip install")]
    assert pips[0].endswith(".whl[client]") and "llguidance>=1.9.1,<2" in pips[-1]  # after the wheel
    assert recorded(env) == "available\n"
    assert "llguidance already installed" in run_install(env).stdout  # a re-run does not rebuild it


def test_an_llguidance_build_failure_is_recorded_and_not_fatal(termux: dict[str, str]) -> None:
    env = {**without_llguidance(termux), "FAIL_LLG": "1"}
    r = run_install(env, "--stamp", "abc")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAILED_PRECONDITION" in r.stdout
    assert recorded(env).startswith("unavailable: pip install llguidance failed (log: ")
    assert (Path(env["HOME"]) / ".edgellm" / "deploy" / "installed.stamp").read_text() == "abc\n"


def test_skipping_llguidance_is_recorded_as_such(termux: dict[str, str]) -> None:
    env = {**without_llguidance(termux), "EDGELLM_SKIP_LLGUIDANCE": "1"}
    assert run_install(env).returncode == 0
    assert not any("llguidance>=" in c for c in calls(env))
    assert recorded(env) == "unavailable: skipped (EDGELLM_SKIP_LLGUIDANCE=1)\n"


@pytest.mark.parametrize(
    ("constrained", "line"),
    [
        ("available", "constrained output: available"),
        (
            "unavailable: pip install llguidance failed (log: ~/.edgellm/logs/llguidance.log)",
            "constrained output: unavailable: pip install llguidance failed (log: ~/.edgellm/logs/"
            "llguidance.log); requests with response_format/json schema get FAILED_PRECONDITION",
        ),
    ],
)
def test_deploy_says_whether_constrained_output_is_available(rig: Rig, constrained: str, line: str) -> None:
    rig.phone.constrained = constrained
    deploy_device(rig.config, rig.io)
    assert line in rig.output
