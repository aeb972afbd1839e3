"""An artifact directory on the device: its typed manifest, validated before anything loads it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.errors import FailedPrecondition, InvalidArgument, NotFound
from edgellm.common.hashing import sha256_file
from edgellm.common.manifest import MANIFEST, ArtifactManifest
from edgellm.common.runtime import Runtime

MNN_CONFIG = "config.json"


@dataclass(frozen=True)
class Artifact:
    """A validated artifact directory."""

    path: Path
    manifest: ArtifactManifest
    artifact_id: str  # sha256 of manifest.json

    @property
    def name(self) -> str:
        """Human name from the manifest."""
        return self.manifest.name

    @property
    def mnn_config(self) -> Path:
        """The MNN LLM config file the runtime opens."""
        return self.path / MNN_CONFIG

    @property
    def token_table(self) -> Path:
        """The token byte table (see edgellm.common.token_table)."""
        return self.path / self.manifest.tokenizer.token_table

    @property
    def stop_token_ids(self) -> frozenset[int]:
        """Token ids that end generation."""
        return frozenset(self.manifest.tokenizer.stop_token_ids)

    @property
    def context_length(self) -> int:
        """The model's trained context length (positions must stay below it)."""
        return self.manifest.model.context_length

    @property
    def runtime(self) -> Runtime:
        """The MNN runtime settings the artifact was built and measured with."""
        return self.manifest.runtime

    @property
    def quantization_label(self) -> str:
        """Short label such as 'int4-b32' or 'int8-pc'."""
        return self.manifest.quantization.label

    @property
    def size_bytes(self) -> int:
        """Sum of the listed files' sizes."""
        return self.manifest.size_bytes


def parse_artifact_manifest(raw: bytes, where: Path) -> ArtifactManifest:
    """The typed manifest of an artifact on disk; a bad one is FAILED_PRECONDITION (rebuild it)."""
    try:
        return ArtifactManifest.from_json(raw)
    except InvalidArgument as err:
        raise FailedPrecondition(f"artifact {where} has an invalid {MANIFEST}: {err}") from err
    except FailedPrecondition as err:  # unsupported schema_version: the message says which one we read
        raise FailedPrecondition(f"artifact {where}: {err}") from err


def open_artifact(path: Path, verify_hashes: bool = False) -> Artifact:
    """Read and check an artifact directory; raise NotFound/FailedPrecondition with a clear message."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise NotFound(f"no artifact at {path}: {MANIFEST} missing (build one with `edgellm convert`)")
    raw = manifest_path.read_bytes()
    manifest = parse_artifact_manifest(raw, path)
    for entry in manifest.files:
        f = path / entry.path
        if not f.is_file() or f.stat().st_size != entry.size:
            raise FailedPrecondition(
                f"artifact {path} is incomplete: {entry.path} missing or of the wrong size"
            )
        if verify_hashes and sha256_file(f) != entry.sha256:
            raise FailedPrecondition(f"artifact {path} is corrupt: {entry.path} does not match its sha256")
    for required in (MNN_CONFIG, manifest.tokenizer.token_table):
        if not (path / required).is_file():
            raise FailedPrecondition(f"artifact {path} has no {required}")
    return Artifact(path=path, manifest=manifest, artifact_id=hashlib.sha256(raw).hexdigest())
