"""Push manifests: parse and validate an artifact's manifest.json before any byte is written."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from edgellm.common.errors import InvalidArgument

MANIFEST = "manifest.json"
# PushArtifact's initial metadata: the serialized ArtifactStatus the device holds once the push
# has the artifact's lock; the client sends chunks only after it, planned from it.
PUSH_STATUS_KEY = "edgellm-push-status-bin"
MAX_MANIFEST_BYTES = 1 << 20
MAX_FILES = 10_000
MAX_PATH_CHARS = 512
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LINK_KEYS = ("link", "symlink", "link_target", "target")


@dataclass(frozen=True)
class FileEntry:
    """One file the manifest promises: a safe relative path, its size and sha256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class PushManifest:
    """A validated manifest; artifact_id is the sha256 of its exact bytes."""

    raw: bytes
    doc: dict[str, Any]
    files: tuple[FileEntry, ...]
    artifact_id: str

    @property
    def total_bytes(self) -> int:
        """Sum of the listed files' sizes."""
        return sum(f.size for f in self.files)

    @property
    def name(self) -> str:
        """Human name, if the manifest has one."""
        return str(self.doc.get("name") or self.artifact_id[:12])

    def unique_blobs(self) -> dict[str, int]:
        """sha256 -> size for each distinct file content."""
        return {f.sha256: f.size for f in self.files}

    def entry(self, path: str) -> FileEntry:
        """The entry for path, or InvalidArgument naming it."""
        for f in self.files:
            if f.path == path:
                return f
        raise InvalidArgument(f"chunk names {path!r}, which the manifest does not list")


def check_path(name: object) -> str:
    """Return name if it is a safe relative POSIX path; else raise InvalidArgument saying why."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"file name {name!r} must be a non-empty string")
    if len(name) > MAX_PATH_CHARS:
        raise InvalidArgument(f"file name {name[:40]!r}... is longer than {MAX_PATH_CHARS} characters")
    if "\x00" in name or any(ord(c) < 32 for c in name):
        raise InvalidArgument(f"file name {name!r} contains a NUL or control character")
    if "\\" in name:
        raise InvalidArgument(f"file name {name!r} contains a backslash; use forward slashes")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise InvalidArgument(f"file name {name!r} is absolute; names must be relative to the artifact")
    parts = name.split("/")
    if ".." in parts:
        raise InvalidArgument(f"file name {name!r} contains '..'")
    if any(p in ("", ".") for p in parts):
        raise InvalidArgument(f"file name {name!r} has an empty or '.' component")
    if name == MANIFEST:
        raise InvalidArgument(f"file name {name!r} is reserved for the manifest itself")
    return str(PurePosixPath(name))


def parse_manifest(text: str | bytes) -> PushManifest:
    """Validate a manifest document (as sent in a push) and compute its artifact id."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if not raw:
        raise InvalidArgument("the manifest is empty (the first message of a push must carry it)")
    if len(raw) > MAX_MANIFEST_BYTES:
        raise InvalidArgument(f"the manifest is {len(raw)} bytes; at most {MAX_MANIFEST_BYTES} allowed")
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InvalidArgument(f"the manifest is not valid JSON: {err}") from err
    if not isinstance(doc, dict):
        raise InvalidArgument("the manifest must be a JSON object")
    entries = doc.get("files")
    if not isinstance(entries, list) or not entries:
        raise InvalidArgument("the manifest lists no files")
    if len(entries) > MAX_FILES:
        raise InvalidArgument(f"the manifest lists {len(entries)} files; at most {MAX_FILES} allowed")
    files: list[FileEntry] = []
    seen: set[str] = set()
    for e in entries:
        files.append(_entry(e))
        if files[-1].path in seen:
            raise InvalidArgument(f"the manifest lists {files[-1].path!r} twice")
        seen.add(files[-1].path)
    # A name that is also another file's directory could never be installed.
    for f in files:
        parts = f.path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in seen:
                raise InvalidArgument(f"{f.path!r} needs {'/'.join(parts[:i])!r} as a directory")
    return PushManifest(raw=raw, doc=doc, files=tuple(files), artifact_id=hashlib.sha256(raw).hexdigest())


def _entry(e: object) -> FileEntry:
    if not isinstance(e, dict):
        raise InvalidArgument(f"manifest file entry {e!r} is not an object")
    path = check_path(e.get("path"))
    kind = e.get("type", "file")
    if kind != "file" or any(k in e for k in _LINK_KEYS):
        raise InvalidArgument(f"{path!r} is a link or special file; only regular files can be pushed")
    size = e.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidArgument(f"{path!r}: size {size!r} is not a non-negative integer")
    sha = e.get("sha256")
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise InvalidArgument(f"{path!r}: sha256 {sha!r} is not 64 lowercase hex digits")
    return FileEntry(path=path, size=size, sha256=sha)
