"""The artifact manifest: files with hashes, source, quantization, model facts, checks."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgellm.common.hashing import sha256_file

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"


class ManifestError(ValueError):
    """A manifest is missing, of an unknown schema, or does not match the files."""


@dataclass(frozen=True)
class FileEntry:
    """One artifact file: path relative to the artifact dir, size, sha256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """Everything needed to trust and load an artifact without guessing from file names."""

    name: str
    files: list[FileEntry]
    source: dict[str, Any]
    quantization: dict[str, Any]
    model: dict[str, Any]
    checks: dict[str, Any]
    tools: dict[str, str]
    created: str
    tokenizer: dict[str, Any] = field(default_factory=dict)
    conversion_seconds: float | None = None
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (schema_version first)."""
        data = asdict(self)
        return {"schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        """Parse and validate a manifest dict."""
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ManifestError(f"unsupported manifest schema_version {version!r}")
        try:
            files = [FileEntry(**entry) for entry in data["files"]]
            fields = {
                k: data[k] for k in ("name", "source", "quantization", "model", "checks", "tools", "created")
            }
        except (KeyError, TypeError) as exc:
            raise ManifestError(f"malformed manifest: {exc}") from exc
        return cls(
            files=files,
            tokenizer=data.get("tokenizer", {}),
            conversion_seconds=data.get("conversion_seconds"),
            extra=data.get("extra", {}),
            **fields,
        )


def list_files(artifact_dir: Path) -> list[FileEntry]:
    """Hash every file under ``artifact_dir`` except the manifest itself."""
    entries = []
    for path in sorted(p for p in artifact_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(artifact_dir).as_posix()
        if rel != MANIFEST_NAME:
            entries.append(FileEntry(rel, path.stat().st_size, sha256_file(path)))
    return entries


def write_manifest(artifact_dir: Path, manifest: Manifest) -> Path:
    """Write ``manifest.json`` into ``artifact_dir`` (via a temp file and rename)."""
    target = artifact_dir / MANIFEST_NAME
    tmp = target.with_name(f".{MANIFEST_NAME}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(manifest.to_dict(), indent=2, sort_keys=False) + "\n")
    tmp.replace(target)
    return target


def load_manifest(artifact_dir: Path) -> Manifest:
    """Read and validate ``artifact_dir/manifest.json``."""
    path = artifact_dir / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"no {MANIFEST_NAME} in {artifact_dir}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path} is not JSON: {exc}") from exc
    return Manifest.from_dict(data)


def verify_files(artifact_dir: Path, manifest: Manifest) -> None:
    """Raise ManifestError unless the files on disk are exactly those listed, byte for byte."""
    actual = {entry.path: entry for entry in list_files(artifact_dir)}
    expected = {entry.path: entry for entry in manifest.files}
    if set(actual) != set(expected):
        missing = sorted(set(expected) - set(actual))
        unexpected = sorted(set(actual) - set(expected))
        raise ManifestError(f"file set differs: missing {missing}, unexpected {unexpected}")
    for path, entry in expected.items():
        if actual[path] != entry:
            raise ManifestError(f"{path}: size/sha256 differ from the manifest")


def publish(staging: Path, out_dir: Path, *, force: bool = False) -> Path:
    """Move a complete ``staging`` dir to ``out_dir`` atomically (replacing it if ``force``)."""
    if out_dir.exists() and not force:
        raise FileExistsError(f"{out_dir} exists (use force to replace it)")
    old: Path | None = None
    if out_dir.exists():
        # os.replace cannot replace a non-empty directory: move the old one aside first.
        old = out_dir.with_name(f"{out_dir.name}.old-{os.getpid()}")
        out_dir.replace(old)
    staging.replace(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out_dir
