"""PushArtifact's contract beside its wire codec: the manifest a push carries, checked before any byte.

Both ends use it: the client (`edgellm.common.pusher`) to plan what to send, the device's store to
decide what to accept. The manifest is the artifact's own (`edgellm.common.manifest`); a push adds
limits (size, file count) and refuses entries the store could never install (links, a file that
is also another file's directory).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from edgellm.common.errors import InvalidArgument
from edgellm.common.manifest import ArtifactManifest, FileEntry, check_path, load_json

# PushArtifact's initial metadata: the serialized ArtifactStatus the device holds once the push
# has the artifact's lock; the client sends chunks only after it, planned from it.
PUSH_STATUS_KEY = "edgellm-push-status-bin"
MAX_MANIFEST_BYTES = 1 << 20
MAX_FILES = 10_000
_LINK_KEYS = ("link", "symlink", "link_target", "target")


@dataclass(frozen=True)
class PushManifest:
    """A validated manifest as pushed; ``artifact_id`` is the sha256 of its exact bytes."""

    raw: bytes
    manifest: ArtifactManifest
    artifact_id: str

    @property
    def files(self) -> tuple[FileEntry, ...]:
        """The files the manifest promises."""
        return self.manifest.files

    @property
    def total_bytes(self) -> int:
        """Sum of the listed files' sizes."""
        return self.manifest.size_bytes

    @property
    def name(self) -> str:
        """The artifact's human name."""
        return self.manifest.name

    def unique_blobs(self) -> dict[str, int]:
        """sha256 -> size for each distinct file content."""
        return {f.sha256: f.size for f in self.files}

    def entry(self, path: str) -> FileEntry:
        """The entry for path, or InvalidArgument naming it."""
        for f in self.files:
            if f.path == path:
                return f
        raise InvalidArgument(f"chunk names {path!r}, which the manifest does not list")


def parse_manifest(text: str | bytes) -> PushManifest:
    """Validate a pushed manifest: wire limits and file entries first, then the artifact schema."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if not raw:
        raise InvalidArgument("the manifest is empty (the first message of a push must carry it)")
    if len(raw) > MAX_MANIFEST_BYTES:
        raise InvalidArgument(f"the manifest is {len(raw)} bytes; at most {MAX_MANIFEST_BYTES} allowed")
    doc = load_json(raw)
    if not isinstance(doc, dict):
        raise InvalidArgument("the manifest must be a JSON object")
    _check_entries(doc.get("files"))
    return PushManifest(
        raw=raw, manifest=ArtifactManifest.from_dict(doc), artifact_id=hashlib.sha256(raw).hexdigest()
    )


def _check_entries(entries: object) -> None:
    """Refuse, before the schema is even read, file lists no store could install safely."""
    if not isinstance(entries, list) or not entries:
        raise InvalidArgument("the manifest lists no files")
    if len(entries) > MAX_FILES:
        raise InvalidArgument(f"the manifest lists {len(entries)} files; at most {MAX_FILES} allowed")
    seen: set[str] = set()
    for e in entries:
        path = _regular_file(e)
        if path in seen:
            raise InvalidArgument(f"the manifest lists {path!r} twice")
        seen.add(path)
    # A name that is also another file's directory could never be installed.
    for path in seen:
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in seen:
                raise InvalidArgument(f"{path!r} needs {'/'.join(parts[:i])!r} as a directory")


def _regular_file(entry: object) -> str:
    """The checked path of one file entry; a link or special file is refused."""
    if not isinstance(entry, dict):
        raise InvalidArgument(f"manifest file entry {entry!r} is not an object")
    path = check_path(entry.get("path"))
    if entry.get("type", "file") != "file" or any(k in entry for k in _LINK_KEYS):
        raise InvalidArgument(f"{path!r} is a link or special file; only regular files can be pushed")
    return path
