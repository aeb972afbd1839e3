"""The quantized artifact's manifest: files with hashes, model shape, plan and measured results."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edgellm.common.hashing import sha256_file

MANIFEST = "manifest.json"


def file_entries(artifact: Path) -> list[dict[str, Any]]:
    """Every regular, non-hidden file with its size and sha256."""
    return [
        {"path": p.name, "size": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(artifact.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.name != MANIFEST
    ]


def write_manifest(artifact: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` plus the file list atomically (temp file + rename)."""
    # Same schema as edgellm.host.convert.manifest (schema_version 1) so every reader accepts it.
    full = {
        "schema_version": 1,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "checks": {},
        "tools": {},
        **doc,
        "files": file_entries(artifact),
    }
    path = artifact / MANIFEST
    tmp = path.with_name(f".{MANIFEST}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(full, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_quantization(artifact: Path) -> dict[str, Any]:
    """The manifest's ``quantization`` section, validated to carry a plan."""
    path = artifact / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing")
    doc = json.loads(path.read_text(encoding="utf-8"))
    q = doc.get("quantization")
    if not isinstance(q, dict) or "plan" not in q:
        raise ValueError(f"{path} has no quantization plan")
    return q
