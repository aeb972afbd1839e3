"""Regenerate the committed gRPC stubs in src/edgellm/v1 from protos/edgellm/v1 (--check: report drift)."""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PROTO_DIR = PROTO_ROOT / "edgellm" / "v1"
STUB_DIR = ROOT / "src" / "edgellm" / "v1"
# Why pinned: generated *_pb2_grpc.py refuse to import under a grpcio older than the generator's,
# and Termux ships python-grpcio 1.81.x. Generating with 1.81.0 keeps every 1.81 phone working.
REQUIRED_TOOLS = "1.81.0"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def generate(out_root: Path) -> list[Path]:
    """Run protoc over every .proto into out_root; return the generated files."""
    import grpc_tools  # type: ignore[import-untyped]
    from grpc_tools import protoc

    version = getattr(grpc_tools, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("grpcio-tools")
    if version != REQUIRED_TOOLS:
        raise SystemExit(f"grpcio-tools {REQUIRED_TOOLS} required, found {version}")
    protos = sorted(PROTO_DIR.glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    # Why explicit plugin paths: the venv's bin/ need not be on PATH (make runs .venv/bin/python).
    bindir = Path(sys.executable).parent
    args = [
        "protoc",
        f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bindir / 'protoc-gen-mypy_grpc'}",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *[str(p) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted(p for p in (out_root / "edgellm" / "v1").iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def main() -> int:
    """Entry point: regenerate in place, or with --check report drift and exit 1."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if regenerating would change anything")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        drift = []
        for path in generated:
            committed = STUB_DIR / path.name
            if ns.check:
                if not committed.exists() or not filecmp.cmp(path, committed, shallow=False):
                    drift.append(path.name)
            else:
                shutil.copyfile(path, committed)
        names = {p.name for p in generated}
        stale = [
            p.name for p in STUB_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES) and p.name not in names
        ]
        if ns.check:
            drift += stale
            if drift:
                sys.stderr.write(f"generated stubs out of date: {', '.join(sorted(drift))}\n")
                sys.stderr.write("run: python scripts/gen_protos.py\n")
                return 1
        else:
            for name in stale:
                (STUB_DIR / name).unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
