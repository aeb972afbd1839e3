"""An artifact directory on the device: its manifest, validated before anything loads it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgellm.common.errors import FailedPrecondition, NotFound
from edgellm.common.hashing import sha256_file
from edgellm.common.token_table import FILENAME as TOKEN_TABLE

MANIFEST = "manifest.json"
MNN_CONFIG = "config.json"


@dataclass(frozen=True)
class Artifact:
    """A validated artifact directory."""

    path: Path
    manifest: dict[str, Any]
    artifact_id: str  # sha256 of manifest.json

    @property
    def name(self) -> str:
        """Human name from the manifest."""
        return str(self.manifest.get("name") or self.path.name)

    @property
    def mnn_config(self) -> Path:
        """The MNN LLM config file the runtime opens."""
        return self.path / MNN_CONFIG

    @property
    def token_table(self) -> Path:
        """The token byte table (see edgellm.common.token_table)."""
        return self.path / TOKEN_TABLE

    @property
    def stop_token_ids(self) -> frozenset[int]:
        """Token ids that end generation."""
        return frozenset(int(t) for t in self.manifest.get("tokenizer", {}).get("stop_token_ids", []))

    @property
    def context_length(self) -> int:
        """The model's trained context length (positions must stay below it)."""
        return int(self.manifest.get("model", {}).get("context_length", 2048))

    @property
    def quantization_label(self) -> str:
        """Short label such as 'int4-b32' or 'int8-pc'."""
        q = self.manifest.get("quantization", {})
        bits, block = q.get("bits"), q.get("block")
        if bits is None:
            return "unknown"
        return f"int{bits}-" + (f"b{block}" if block else "pc")

    @property
    def size_bytes(self) -> int:
        """Sum of the listed files' sizes."""
        return sum(int(f["size"]) for f in self.manifest.get("files", []))


def open_artifact(path: Path, verify_hashes: bool = False) -> Artifact:
    """Read and check an artifact directory; raise NotFound/FailedPrecondition with a clear message."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise NotFound(f"no artifact at {path}: {MANIFEST} missing (build one with `edgellm convert`)")
    raw = manifest_path.read_bytes()
    try:
        manifest = json.loads(raw)
    except json.JSONDecodeError as err:
        raise FailedPrecondition(f"{manifest_path} is not valid JSON: {err}") from err
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise FailedPrecondition(f"{manifest_path} lists no files")
    for entry in files:
        rel = Path(str(entry.get("path", "")))
        if rel.is_absolute() or ".." in rel.parts:
            raise FailedPrecondition(f"{manifest_path}: unsafe file name {rel}")
        f = path / rel
        if not f.is_file() or f.stat().st_size != int(entry.get("size", -1)):
            raise FailedPrecondition(f"artifact {path} is incomplete: {rel} missing or of the wrong size")
        if verify_hashes and sha256_file(f) != entry.get("sha256"):
            raise FailedPrecondition(f"artifact {path} is corrupt: {rel} does not match its sha256")
    for required in (MNN_CONFIG, TOKEN_TABLE):
        if not (path / required).is_file():
            raise FailedPrecondition(f"artifact {path} has no {required}")
    return Artifact(path=path, manifest=manifest, artifact_id=hashlib.sha256(raw).hexdigest())
