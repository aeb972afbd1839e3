"""`make test-arm`: edgellm's device side on emulated aarch64, end to end.

1. build (or reuse) the arm64 environment of scripts/arm64_env.py (Python 3.13, the device extra);
2. the device-side unit tests that need no host dependency, under the emulated Python;
3. the real `edgellm daemon` under qemu-aarch64, driven from this host's x86 client over gRPC
   (tests/arm: Paris, telemetry from the fixture sysfs tree, sliding window, push + load).

  python -m scripts.test_arm [--smoke] [--skip-unit] [PYTEST_ARGS...]

--smoke keeps only "daemon up on aarch64, one Generate answers Paris". Prints what ran and how
long each step took; the facts land in .cache/arm64/last-run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from scripts.arm64_env import CACHE, REPO, ensure, facts

# Device-side modules whose tests import nothing of the host side (torch, transformers, tqdm):
# the emulated environment has none of it, so a host import fails their collection. Left out:
# the governor's thermal simulations (tests/governor/test_controller.py, test_virtual_phone.py),
# pure-Python arithmetic with nothing ARM-specific, ~8 s here and ~15 minutes under emulation.
DEVICE_UNIT_TESTS = (
    "tests/device/test_termux.py",
    "tests/device/test_sampler.py",
    "tests/device/test_text.py",
    "tests/device/test_token_table.py",
    "tests/device/test_kv_window.py",
    "tests/telemetry/test_readers.py",
    "tests/governor/test_actuators.py",
    "tests/store/test_store.py",
    "tests/common/test_allocator.py",
    "tests/push/test_wire.py",
)
REPORT = CACHE / "last-run.json"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the steps; the exit code is the first failing step's."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="only: daemon up on aarch64, Generate answers Paris")
    p.add_argument("--skip-unit", action="store_true", help="skip the emulated unit tests")
    ns, pytest_args = p.parse_known_args(argv)
    steps: dict[str, float] = {}
    start = time.monotonic()
    REPORT.unlink(missing_ok=True)

    env = ensure()
    steps["build_s"] = time.monotonic() - start
    print(json.dumps(facts(env)), flush=True)
    code = 0
    if not (ns.smoke or ns.skip_unit):
        t = time.monotonic()
        cmd = env.command(["-m", "pytest", "-q", "-p", "no:cacheprovider", *DEVICE_UNIT_TESTS])
        code = subprocess.run(cmd, env=env.environ(tools=True), cwd=REPO).returncode
        steps["unit_tests_s"] = time.monotonic() - t
    if code == 0:
        t = time.monotonic()
        select = "arm_smoke" if ns.smoke else "arm"  # the smoke is what `make test` runs
        cmd = [sys.executable, "-m", "pytest", "-m", select, "-v", *pytest_args, "tests/arm"]
        code = subprocess.run(cmd, cwd=REPO, env=os.environ).returncode
        steps["daemon_tests_s"] = time.monotonic() - t
    steps["total_s"] = time.monotonic() - start
    report = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
    report.update(
        finished=datetime.now(UTC).isoformat(timespec="seconds"),
        passed=code == 0,
        smoke=ns.smoke,
        **{k: round(v, 1) for k, v in steps.items()},
    )
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
