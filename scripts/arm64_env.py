"""An emulated arm64 Python holding edgellm with only its device dependencies (the phone's set).

Built once under .cache/arm64/<key>/ from Debian's and PyPI's registries, then run through
qemu-aarch64-static with `-L ROOT` (no binfmt_misc, no chroot):

  python -m scripts.arm64_env build              # idempotent; prints what the env holds
  python -m scripts.arm64_env python -- ARGS...  # the emulated python3 with this checkout installed

- root/  Debian 13 (trixie) arm64 python3 (3.13, Termux's version) unpacked by `mmdebstrap
         --variant=extract`: nothing of the root runs at build time, so no emulation is needed.
- site/  `pip install --target --platform manylinux_2_17_aarch64 --only-binary=:all:` of the
         edgellm wheel's phone set, `[device,client,gateway]`: mnn, numpy, grpcio, protobuf, structlog,
         tqdm, and the gateway's starlette, uvicorn (h11), prometheus-client. The
         grpcio family is pinned to the oldest release pyproject allows (the 1.81 line Termux's
         `pkg` ships); nothing of the host side (torch, transformers) is installed.
- tools/ pytest and its plugins (pure Python), only on the path of the emulated unit tests.
- app/   this checkout's edgellm wheel, reinstalled whenever src/ or pyproject.toml change.

Needs root for apt (qemu-user-static, mmdebstrap are installed when missing) and the Debian and
PyPI registries. Rules that come from running a foreign Python through `-L` (docs/arm.md):
qemu looks every path up under ROOT first, so ROOT keeps no tmp/, dev/, proc/, sys/ (they would
hide the host's); and an emulated process cannot exec another ARM binary (that needs binfmt), so
it must not spawn `sys.executable`; a host program (`/bin/sh`) runs natively.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.paths import data_dir

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "arm64"
SUITE = "trixie"  # Debian 13: Python 3.13, the version Termux ships
MIRROR = "http://deb.debian.org/debian"
DEBS = ("python3", "libstdc++6")  # MNN's and grpcio's wheels link libstdc++; they bundle the rest
PY = "python3.13"
PLATFORMS = ("manylinux_2_17_aarch64", "manylinux2014_aarch64", "manylinux_2_28_aarch64")
# pytest and plugins for the emulated unit tests, at the host venv's versions when it has them.
TEST_TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout")
HOST_TOOLS = {"qemu-aarch64-static": "qemu-user-static", "mmdebstrap": "mmdebstrap"}
# Paths a qemu -L prefix must not have: qemu would show the root's copy instead of the host's.
HIDING = ("tmp", "dev", "proc", "sys", "run", "var/tmp", "root", "home")
RECIPE_VERSION = 1  # bump when the build steps change


def log(msg: str) -> None:
    """One progress line on stderr."""
    print(f"[arm64] {msg}", file=sys.stderr, flush=True)


# The phone's set: deploy/termux/install.sh pip-installs the wheel with [client] beside the
# [device] packages (numpy and grpcio from pkg, MNN built from source), and with [gateway] too when
# deployed with `--gateway` (pure-Python wheels only, docs/gateway.md). No matplotlib (`plot`).
PHONE_EXTRAS = ("device", "client", "gateway")


def device_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """edgellm's core + the phone's extras' requirements, the grpcio family pinned to its lower bound.

    Why pin: Termux installs grpcio from `pkg` (pip cannot build it there), i.e. whatever 1.81.x
    the repository carries; the oldest release pyproject accepts is the one to prove.
    """
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project["optional-dependencies"]
    reqs: list[str] = [*project["dependencies"], *(r for e in PHONE_EXTRAS for r in extras[e])]
    out = []
    for req in reqs:
        name = req.split(">")[0].split("=")[0].split("<")[0].split("~")[0].strip()
        if name.startswith("grpcio") and ">=" in req:
            low = req.split(">=")[1].split(",")[0].strip()
            req = f"{name}=={low}"
        out.append(req)
    return out


def test_tool_requirements() -> list[str]:
    """pytest & co. pinned to the versions installed next to this script's interpreter."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in TEST_TOOLS:
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            out.append(name)
    return out


@dataclass(frozen=True)
class ArmEnv:
    """A built environment: where its parts are and how to run its Python."""

    base: Path

    @property
    def root(self) -> Path:
        """The arm64 Debian root (qemu's -L prefix)."""
        return self.base / "root"

    @property
    def site(self) -> Path:
        """edgellm's device dependencies."""
        return self.base / "site"

    @property
    def tools(self) -> Path:
        """pytest and its plugins."""
        return self.base / "tools"

    @property
    def app(self) -> Path:
        """This checkout's edgellm, installed from its wheel."""
        return self.base / "app"

    def command(self, args: Sequence[str], cpu: str = "max") -> list[str]:
        """The host command line that runs `python3 ARGS` on the emulated aarch64 CPU.

        `-cpu max` gives ARMv8.2+ FP16 arithmetic and dot product (MNN's Arm82 backend and its
        sdot/i8mm int8 kernels), like any phone core since the Cortex-A55/A75.
        """
        qemu = shutil.which("qemu-aarch64-static") or "qemu-aarch64-static"
        return [qemu, "-cpu", cpu, "-L", str(self.root), str(self.root / "usr" / "bin" / PY), *args]

    def environ(self, tools: bool = False, android: bool = False) -> dict[str, str]:
        """Environment for an emulated process: only the env's paths, bytecode cached beside them.

        android: start Python with Termux's identity (sys.platform "android", tests/arm/termux).
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        paths = [self.app, self.site] + ([self.tools] if tools else [])
        if android:
            paths.insert(0, REPO / "tests" / "arm" / "termux")
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
        env["PYTHONNOUSERSITE"] = "1"
        env["EDGELLM_EMULATED"] = "aarch64"  # tests that would exec sys.executable skip on it
        env["PYTHONUNBUFFERED"] = "1"
        # The installed package cannot find the checkout's .cache or the shared data by itself.
        env.setdefault("EDGELLM_CACHE_DIR", str(REPO / ".cache"))
        env.setdefault("EDGELLM_DATA_DIR", str(data_dir()))
        return env


def key() -> str:
    """Cache key of everything the environment is built from (not of edgellm's own code)."""
    spec = {
        "recipe": RECIPE_VERSION,
        "suite": SUITE,
        "debs": DEBS,
        "platforms": PLATFORMS,
        "device": device_requirements(),
        "tools": test_tool_requirements(),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def run(cmd: Sequence[str | Path], **kw: object) -> None:
    """Run a build step, failing with its command line."""
    log("$ " + " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, **kw)  # type: ignore[call-overload]


def ensure_host_tools() -> None:
    """apt-get install qemu-user-static and mmdebstrap when they are missing (needs root)."""
    missing = [pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"missing {', '.join(missing)}: run `sudo apt-get install {' '.join(missing)}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-q"], env=env)
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], env=env)


def build_root(root: Path) -> None:
    """Unpack Debian's arm64 python3 and its libraries into root (no maintainer scripts run)."""
    tmp = root.with_name("root.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    run(
        [
            "mmdebstrap",
            "--variant=extract",
            "--architectures=arm64",
            "--mode=root",
            "--include=" + ",".join(DEBS),
            SUITE,
            tmp,
            MIRROR,
        ]
    )
    # Why: --variant=extract runs no hooks, so the merged-/usr links (/lib -> usr/lib, where the
    # dynamic loader /lib/ld-linux-aarch64.so.1 is looked up) are not made.
    for d in ("bin", "sbin", "lib"):
        if not (tmp / d).exists():
            (tmp / d).symlink_to(f"usr/{d}")
    for d in HIDING:
        p = tmp / d
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p)
    tmp.rename(root)


def pip_target(target: Path, reqs: Sequence[str], platform: bool = True) -> None:
    """pip install reqs into target: for cp313 aarch64 (binary wheels only), or alone (no deps)."""
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd: list[str | Path] = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-compile",
        "--target",
        tmp,
    ]
    if platform:
        cmd += ["--only-binary=:all:", "--implementation", "cp", "--python-version", "3.13", "--abi", "cp313"]
        for p in PLATFORMS:
            cmd += ["--platform", p]
    else:
        cmd += ["--no-deps"]
    run([*cmd, *reqs])
    tmp.rename(target)


def build_wheel(out: Path) -> Path:
    """This checkout's edgellm wheel (pure Python), built without network."""
    shutil.rmtree(out, ignore_errors=True)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            out,
            REPO,
        ],
        stdout=subprocess.DEVNULL,
    )
    shutil.rmtree(REPO / "build", ignore_errors=True)
    (wheel,) = out.glob("edgellm-*.whl")
    return wheel


def source_digest() -> str:
    """Hash of what goes into the edgellm wheel: src/ and pyproject.toml."""
    h = hashlib.sha256((REPO / "pyproject.toml").read_bytes())
    for p in sorted((REPO / "src").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc"):
            h.update(str(p.relative_to(REPO)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def install_app(env: ArmEnv) -> None:
    """(Re)install this checkout's edgellm into app/ when its sources changed."""
    digest = source_digest()
    stamp = env.app / ".source"
    if stamp.is_file() and stamp.read_text() == digest:
        return
    with tempfile.TemporaryDirectory(dir=env.base) as tmp:
        wheel = build_wheel(Path(tmp) / "wheel")
        shutil.rmtree(env.app, ignore_errors=True)
        pip_target(env.app, [str(wheel)], platform=False)
    stamp.write_text(digest)


# Imported once under emulation at build time so that Python writes their bytecode (and the
# stdlib's, which it finds under ROOT/usr/lib/python3.13 through its own executable's path).
# Without .pyc files Python 3.13 compiles typing, ast, inspect... from source at ~1 s each under
# emulation: `import MNN.llm` took 40 s, 12 s with bytecode.
WARM_IMPORTS = (
    "asyncio",
    "concurrent.futures",
    "ctypes",
    "json",
    "MNN.llm",
    "numpy",
    "grpc",
    "grpc.aio",
    "google.protobuf",
    "structlog",
    "edgellm.cli",
    "edgellm.device.rpc.server",
    "edgellm.client.client",
    "edgellm.gateway.server",
    "pytest",
    "pytest_asyncio",
    "pytest_timeout",
)


def warm_bytecode(env: ArmEnv) -> None:
    """Import WARM_IMPORTS once under emulation, writing their bytecode."""
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    done = subprocess.run(
        env.command(["-c", code, *WARM_IMPORTS]), env=env.environ(tools=True), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"importing the daemon's modules under emulation failed:\n{done.stderr[-3000:]}")


def facts(env: ArmEnv) -> dict[str, object]:
    """What the emulated Python reports about itself and what it can import."""
    probe = (
        "import json, os, platform, sys, importlib.metadata as md, importlib.util as u\n"
        "d = {'machine': os.uname().machine, 'python': platform.python_version(), 'platform': sys.platform}\n"
        "for n in ('mnn', 'numpy', 'grpcio', 'protobuf', 'structlog', 'starlette', 'uvicorn', 'edgellm'):\n"
        "    d[n] = md.version(n)\n"
        "d['host_side_importable'] = [m for m in ('torch', 'transformers', 'tqdm', 'matplotlib')"
        " if u.find_spec(m)]\n"
        "print(json.dumps(d))\n"
    )
    out = subprocess.run(
        env.command(["-c", probe]), env=env.environ(), check=True, capture_output=True, text=True
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def ensure() -> ArmEnv:
    """Build what is missing (the first time ~5 minutes) and return the environment."""
    start = time.monotonic()
    env = ArmEnv(CACHE / key())
    env.base.mkdir(parents=True, exist_ok=True)
    ensure_host_tools()
    if not env.root.is_dir():
        build_root(env.root)
    if not env.site.is_dir():
        with tempfile.TemporaryDirectory(dir=env.base) as tmp:
            wheel = build_wheel(Path(tmp) / "wheel")
            reqs = [r for r in device_requirements() if not r.startswith("mnn")]
            # The wheel's own metadata decides the set: the phone's extras plus the grpcio pins.
            pip_target(env.site, [f"edgellm[{','.join(PHONE_EXTRAS)}] @ {wheel.as_uri()}", *reqs])
        shutil.rmtree(next(iter(env.site.glob("edgellm-*.dist-info"))), ignore_errors=True)
        shutil.rmtree(env.site / "edgellm", ignore_errors=True)
    if not env.tools.is_dir():
        pip_target(env.tools, test_tool_requirements())
    install_app(env)
    stamp = env.base / ".warm"
    if not stamp.is_file():
        warm_bytecode(env)
        stamp.touch()
    for old in CACHE.iterdir():
        if old.is_dir() and old != env.base:
            shutil.rmtree(old, ignore_errors=True)  # a previous recipe's environment
    log(f"ready in {time.monotonic() - start:.0f} s: {env.base}")
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: build, or run the emulated python."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build (or reuse) the environment and print its facts")
    py = sub.add_parser("python", help="run the emulated python3 with the given arguments")
    py.add_argument("--tools", action="store_true", help="put pytest on the path")
    py.add_argument("--android", action="store_true", help="sys.platform 'android' (tests/arm/termux)")
    py.add_argument("args", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    env = ensure()
    if ns.cmd == "build":
        print(json.dumps(facts(env), indent=1))
        return 0
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    return subprocess.run(env.command(args), env=env.environ(ns.tools, ns.android)).returncode


if __name__ == "__main__":
    sys.exit(main())
