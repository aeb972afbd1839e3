"""An artifact directory on the device: its typed manifest, validated before anything loads it."""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.errors import EdgeError, FailedPrecondition, InvalidArgument, NotFound
from edgellm.common.hashing import sha256_file
from edgellm.common.logs import get_logger
from edgellm.common.manifest import MANIFEST, ArtifactManifest
from edgellm.common.runtime import Runtime
from edgellm.engine.mnn_paths import MNN_CONFIG, artifact_label, check_mnn_paths

log = get_logger(__name__)


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
        raise FailedPrecondition(
            f"artifact {artifact_label(where)} has an invalid {MANIFEST}: {err}"
        ) from err
    except FailedPrecondition as err:  # unsupported schema_version: the message says which one we read
        raise FailedPrecondition(f"artifact {artifact_label(where)}: {err}") from err


def open_artifact(path: Path, verify_hashes: bool = False, links_into: Path | None = None) -> Artifact:
    """Read and check an artifact directory; raise NotFound/FailedPrecondition with a clear message.

    Every listed file must be a regular file inside `path` reached through real directories; a
    symbolic link is accepted only when `links_into` is given and it points into that directory
    (the store's blobs, where Android refuses hard links). With `verify_hashes`, each file's
    sha256 is checked too. Before MNN opens it, `check_loadable` checks what its config names.

    Messages name the artifact by its id (or its directory's name) and the file inside it, never
    the device's absolute path (finding L9); the log keeps the path.
    """
    try:
        return _open(path, verify_hashes, links_into)
    except EdgeError as err:
        log.info("artifact_refused", path=str(path), reason=str(err))
        raise


def _open(path: Path, verify_hashes: bool, links_into: Path | None) -> Artifact:
    label = artifact_label(path)
    manifest_path = path / MANIFEST
    if manifest_path.is_symlink() or not manifest_path.is_file():
        raise NotFound(f"no artifact {label}: {MANIFEST} missing (build one with `edgellm convert`)")
    raw = manifest_path.read_bytes()
    manifest = parse_artifact_manifest(raw, path)
    for entry in manifest.files:
        f = _listed_file(path, entry.path, links_into)
        if f is None or f.stat().st_size != entry.size:
            raise FailedPrecondition(
                f"artifact {label} is incomplete: {entry.path} missing or of the wrong size"
            )
        if verify_hashes and not _hash_matches(f, entry.sha256):
            raise FailedPrecondition(f"artifact {label} is corrupt: {entry.path} does not match its sha256")
    listed = {f.path for f in manifest.files}
    for required in (MNN_CONFIG, manifest.tokenizer.token_table):
        if required not in listed:
            raise FailedPrecondition(f"artifact {label} has no {required} (its manifest does not list it)")
    return Artifact(path=path, manifest=manifest, artifact_id=hashlib.sha256(raw).hexdigest())


def check_loadable(artifact: Artifact) -> None:
    """FailedPrecondition unless the MNN config names only files the manifest lists (S3)."""
    check_mnn_paths(artifact.path, {f.path for f in artifact.manifest.files})


def _listed_file(root: Path, name: str, links_into: Path | None) -> Path | None:
    """The file `name` under root if every directory on the way is real and it is a regular file
    (or a link into `links_into`); None if it is missing; FailedPrecondition if it is a link out."""
    here = root
    parts = name.split("/")
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise FailedPrecondition(
                f"artifact {artifact_label(root)}: {name} is reached through a symbolic link"
            )
    f = here / parts[-1]
    try:
        st = f.lstat()
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        target = f.resolve()
        if links_into is None or not target.is_relative_to(links_into.resolve()):
            raise FailedPrecondition(
                f"artifact {artifact_label(root)}: {name} is a symbolic link; "
                "artifact files must be regular files"
            )
        return target if target.is_file() else None
    if not stat.S_ISREG(st.st_mode):
        raise FailedPrecondition(f"artifact {artifact_label(root)}: {name} is not a regular file")
    return f


# Files already hashed in this process, by identity and change time: a file whose inode, size and
# mtime are unchanged is not re-read on every load (hashing a model costs seconds on a phone).
_VERIFIED: dict[tuple[int, int, int, int, int], str] = {}


def _hash_matches(f: Path, sha256: str) -> bool:
    st = f.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if _VERIFIED.get(key) == sha256:
        return True
    ok = sha256_file(f) == sha256
    if ok:
        _VERIFIED[key] = sha256
    return ok
