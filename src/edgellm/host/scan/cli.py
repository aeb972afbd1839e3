"""`edgellm scan ARTIFACT --backend B`: operators in the graph vs the backend's support table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edgellm.common.paths import resolve_artifact


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `scan` subcommand."""
    p = sub.add_parser("scan", help="list an artifact's operators and check them against a backend")
    p.add_argument(
        "artifact",
        type=Path,
        help="artifact directory or .mnn file, or 'default' (the cached default artifact)",
    )
    p.add_argument(
        "--backend", choices=("cpu", "opencl", "vulkan", "npu"), default="cpu", help="MNN backend to check"
    )
    p.add_argument("--allow-fallback", action="store_true", help="succeed even if ops fall back to the CPU")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Scan; unsupported operators exit 1 unless --allow-fallback."""
    from edgellm.host.scan.scan import scan

    try:
        report = scan(resolve_artifact(ns.artifact), ns.backend, allow_fallback=True)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        sys.stderr.write(f"edgellm scan: {exc}\n")
        return 2
    sys.stdout.write((json.dumps(report.to_dict(), indent=2) if ns.json else report.table()) + "\n")
    if report.fallback and not ns.allow_fallback:
        sys.stderr.write(
            f"edgellm scan: {ns.backend} cannot run {', '.join(report.fallback)}; "
            "pass --allow-fallback to run them on the CPU\n"
        )
        return 1
    return 0
