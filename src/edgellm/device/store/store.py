"""The device's content-addressed artifact store: blobs by sha256, staging, atomic installs.

Layout under `root` (the daemon's data_dir/store):
  blobs/<sha256>                  verified file contents, shared by every artifact that lists them
  staging/<artifact_id>/          an unfinished push: manifest.json + <sha256>.part files
  artifacts/<artifact_id>/        an installed artifact: links to blobs, manifest.json written last
  tmp/, trash/                    installs being assembled and deletions in progress
Only `artifacts/` is ever visible to ListModels/LoadModel, and a directory appears there by one
rename, so no crash or refusal can leave a half-installed artifact visible.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.durable import write_fresh
from edgellm.common.errors import (
    AlreadyExists,
    EdgeError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from edgellm.common.logs import get_logger
from edgellm.common.manifest import MANIFEST
from edgellm.common.push_manifest import PushManifest, parse_manifest
from edgellm.engine.artifact import Artifact, parse_artifact_manifest

log = get_logger(__name__)

FreeBytes = Callable[[Path], int]
_ARTIFACT_ID = re.compile(r"[0-9a-f]{64}")
# Why 7 days: a push cut off by a dropped link resumes within minutes or hours; staging older than
# a week is abandoned and only holds disk (finding S9).
STAGING_TTL_S = 7 * 24 * 3600


def check_artifact_id(artifact_id: str) -> str:
    """Return artifact_id if it is 64 lowercase hex digits (a sha256), else InvalidArgument."""
    if not _ARTIFACT_ID.fullmatch(artifact_id):
        raise InvalidArgument(
            f"artifact_id {artifact_id[:80]!r} is not an artifact id (64 lowercase hex digits; "
            "see `edgellm models`)"
        )
    return artifact_id


def default_limits(root: Path, quota_bytes: int | None, reserve_bytes: int | None) -> tuple[int, int]:
    """The store's (quota, disk reserve): given values, or the defaults for the disk under root.

    Why these defaults (finding S9): a phone's /data is shared with every app, so pushes may use at
    most half of what is free when the daemon starts, and never the last 1 GiB or 5 %.
    """
    root.mkdir(parents=True, exist_ok=True)
    st = os.statvfs(root)
    if reserve_bytes is None:
        reserve_bytes = max(1 << 30, st.f_blocks * st.f_frsize // 20)
    if quota_bytes is None:
        # What the quota counts (as `used_bytes` does): blobs and staged parts, not the links to them.
        held = [*(root / "blobs").glob("*"), *(root / "staging").glob("*/*.part")]
        quota_bytes = sum(p.lstat().st_size for p in held) + st.f_bavail * st.f_frsize // 2
    return quota_bytes, reserve_bytes


def disk_free(path: Path) -> int:
    """Bytes an unprivileged process may still write on path's filesystem."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@dataclass(frozen=True)
class FileState:
    """How much of one manifest file the store holds."""

    path: str
    size: int
    have_bytes: int
    complete: bool


@dataclass(frozen=True)
class StoreStatus:
    """What the store already holds of an artifact (for resume)."""

    artifact_id: str
    installed: bool
    files: tuple[FileState, ...]

    @property
    def missing_bytes(self) -> int:
        """Bytes still to be sent (counting each distinct blob once is the caller's business)."""
        return sum(f.size - f.have_bytes for f in self.files)


class ArtifactStore:
    """Blobs, staging and installed artifacts under one root; all methods are synchronous.

    Callers on an event loop run them in an executor; `lock` serialises every method that
    changes the store (begin, commit, install, delete, gc), so gc never sees an install between
    its scans (finding S21).
    """

    def __init__(
        self,
        root: Path,
        quota_bytes: int = 0,
        disk_reserve_bytes: int = 0,
        free_bytes: FreeBytes = disk_free,
    ) -> None:
        self.root = root
        self.quota_bytes = quota_bytes  # 0 = no quota
        self.disk_reserve_bytes = disk_reserve_bytes
        self.free_bytes = free_bytes
        self.blobs = root / "blobs"
        self.staging = root / "staging"
        self.artifacts = root / "artifacts"
        self.tmp = root / "tmp"
        self.trash = root / "trash"
        self.reserved: dict[str, int] = {}  # artifact_id -> bytes promised to a running push
        self.lock = threading.RLock()
        for d in (self.blobs, self.staging, self.artifacts, self.tmp, self.trash):
            d.mkdir(parents=True, exist_ok=True)
        self._recover()

    def _recover(self) -> None:
        """Remove half-built installs and half-finished deletions left by a crash, and old staging."""
        for d in (self.tmp, self.trash):
            for child in d.iterdir():
                _remove(child)
        self.expire_staging()

    def expire_staging(self, ttl_s: float = STAGING_TTL_S, now: float | None = None) -> int:
        """Discard staged pushes untouched for ttl_s seconds (and their blobs); return how many."""
        now = time.time() if now is None else now
        expired = 0
        with self.lock:
            for d in list(self.staging.iterdir()):
                try:
                    newest = max([d.stat().st_mtime, *(p.stat().st_mtime for p in d.iterdir())])
                except OSError:
                    continue
                if now - newest > ttl_s and d.name not in self.reserved:
                    log.info("staging_expired", artifact_id=d.name[:12], age_s=round(now - newest))
                    _remove(d)
                    expired += 1
            if expired:
                self.gc()
        return expired

    # -- queries -------------------------------------------------------------------------------------
    def blob(self, sha256: str) -> Path:
        """Path of a blob (which may not exist)."""
        return self.blobs / sha256

    def has_blob(self, sha256: str, size: int) -> bool:
        """Whether a blob is present as a regular file of the expected size (never a link).

        Why the size: a blob whose size is wrong was changed after its hash was checked; counting
        it present would make a re-push skip it, so the damage could never be repaired (S1).
        """
        try:
            st = self.blob(sha256).lstat()
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_size == size

    def part(self, artifact_id: str, sha256: str) -> Path:
        """Path of a staged partial file."""
        return self.staging / check_artifact_id(artifact_id) / f"{sha256}.part"

    def is_installed(self, artifact_id: str) -> bool:
        """True if the artifact is installed (its manifest is in place)."""
        return (self.artifacts / check_artifact_id(artifact_id) / MANIFEST).is_file()

    def status(self, manifest: PushManifest) -> StoreStatus:
        """What is already here of manifest's files: complete blobs and staged prefixes."""
        files = []
        for f in manifest.files:
            if self.has_blob(f.sha256, f.size):
                have, done = f.size, True
            else:
                try:
                    have = min(self.part(manifest.artifact_id, f.sha256).stat().st_size, f.size)
                except FileNotFoundError:
                    have = 0
                done = False
            files.append(FileState(f.path, f.size, have, done))
        return StoreStatus(manifest.artifact_id, self.is_installed(manifest.artifact_id), tuple(files))

    def known_manifest(self, artifact_id: str) -> PushManifest:
        """The manifest of an installed or staged artifact, by id."""
        check_artifact_id(artifact_id)
        for d in (self.artifacts, self.staging):
            path = d / artifact_id / MANIFEST
            if path.is_file():
                return parse_manifest(path.read_bytes())
        raise NotFound(f"artifact {artifact_id} is neither installed nor staged on this device")

    def installed(self) -> list[Artifact]:
        """Every installed artifact this edgellm can read (others, e.g. an older schema, are logged)."""
        out = []
        for d in sorted(self.artifacts.iterdir()):
            try:
                raw = (d / MANIFEST).read_bytes()
                out.append(Artifact(path=d, manifest=parse_artifact_manifest(raw, d), artifact_id=d.name))
            except (OSError, EdgeError) as err:
                log.warning("artifact_unreadable", path=str(d), error=str(err))
        return out

    def resolve(self, name: str) -> Artifact:
        """An installed artifact by id, id prefix (8+ hex digits) or manifest name."""
        path = self.resolve_dir(name)
        return Artifact(path, parse_artifact_manifest((path / MANIFEST).read_bytes(), path), path.name)

    def resolve_dir(self, name: str) -> Path:
        """An installed artifact's directory by id, id prefix (8+ hex digits) or manifest name.

        Ids match directory names without reading the manifest, so loading an artifact of an
        unsupported schema fails with the schema's message rather than "not found".
        """
        hits = self._dirs_by_id(name) or [a.path for a in self.installed() if a.name == name]
        if len(hits) > 1:
            raise FailedPrecondition(f"{name!r} names {len(hits)} artifacts; use the artifact id")
        if not hits:
            raise NotFound(f"no installed artifact is called {name!r} (see `edgellm models`)")
        return hits[0]

    def _dirs_by_id(self, name: str) -> list[Path]:
        """Installed directories whose id is `name`, else (8+ digits) starts with it."""
        dirs = [d for d in sorted(self.artifacts.iterdir()) if (d / MANIFEST).is_file()]
        hits = [d for d in dirs if d.name == name]
        if not hits and len(name) >= 8:
            hits = [d for d in dirs if d.name.startswith(name)]
        return hits

    def check_name_free(self, manifest: PushManifest) -> None:
        """Refuse a push whose name an installed artifact with another id already has (S13)."""
        for art in self.installed():
            if art.name == manifest.name and art.artifact_id != manifest.artifact_id:
                raise AlreadyExists(
                    f"the name {manifest.name!r} is taken by installed artifact {art.artifact_id[:12]}; "
                    f"rename the artifact, or delete that one first (`edgellm rm {art.artifact_id[:12]}`)"
                )

    def used_bytes(self) -> int:
        """Bytes held by blobs and staged parts."""
        total = sum(p.stat().st_size for p in self.blobs.iterdir())
        for d in self.staging.iterdir():
            total += sum(p.stat().st_size for p in d.glob("*.part"))
        return total

    # -- admission -----------------------------------------------------------------------------------
    def reserve(self, manifest: PushManifest, status: StoreStatus) -> int:
        """Check quota and free disk for what is still missing, up front; return the bytes reserved."""
        need = 0
        seen: set[str] = set()
        for f, st in zip(manifest.files, status.files, strict=True):
            if f.sha256 not in seen:
                seen.add(f.sha256)
                need += f.size - st.have_bytes
        others = sum(v for k, v in self.reserved.items() if k != manifest.artifact_id)
        if self.quota_bytes:
            used = self.used_bytes()
            if used + others + need > self.quota_bytes:
                raise ResourceExhausted(
                    f"store quota exceeded: artifact needs {need} more bytes, store holds {used} of "
                    f"{self.quota_bytes} (delete artifacts with `edgellm rm`)"
                )
        free = self.free_bytes(self.root)
        if need + others + self.disk_reserve_bytes > free:
            raise ResourceExhausted(
                f"not enough free disk on the device: artifact needs {need} more bytes "
                f"(+{self.disk_reserve_bytes} reserve), {free} free"
            )
        self.reserved[manifest.artifact_id] = need
        return need

    def release(self, artifact_id: str) -> None:
        """Forget a push's reservation."""
        self.reserved.pop(artifact_id, None)

    # -- writes --------------------------------------------------------------------------------------
    def begin(self, manifest: PushManifest) -> Path:
        """Create (or reuse) the staging directory, manifest first so a restart knows the push."""
        with self.lock:
            d = self.staging / manifest.artifact_id
            d.mkdir(exist_ok=True)
            m = d / MANIFEST
            if not m.is_file():
                self._write_new(m, manifest.raw)
            return d

    def commit_blob(self, part: Path, sha256: str) -> None:
        """Move a verified part into the blob store (identical content may already be there)."""
        with self.lock:
            part.replace(self.blob(sha256))

    def install(self, manifest: PushManifest) -> Artifact:
        """Assemble the artifact in tmp/ from blobs, write its manifest last, rename into place."""
        with self.lock:
            return self._install(manifest)

    def _install(self, manifest: PushManifest) -> Artifact:
        final = self.artifacts / manifest.artifact_id
        if not self.is_installed(manifest.artifact_id):
            # Again here, under the lock (finding L7): two pushes of one name with different ids
            # both pass the check at push start, and both used to install.
            self.check_name_free(manifest)
            missing = [f.path for f in manifest.files if not self.has_blob(f.sha256, f.size)]
            if missing:
                raise FailedPrecondition(f"cannot install: {len(missing)} files missing, e.g. {missing[0]}")
            build = self.tmp / f"{manifest.artifact_id}.{uuid.uuid4().hex[:8]}"
            build.mkdir()
            try:
                for f in manifest.files:
                    dst = build / f.path
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    _link(self.blob(f.sha256), dst)
                self._write_new(build / MANIFEST, manifest.raw)
                build.rename(final)
            except OSError as err:
                _remove(build)
                if not self.is_installed(manifest.artifact_id):
                    raise _disk_error(err) from err
            _fsync_dir(self.artifacts)
        _remove(self.staging / manifest.artifact_id)
        return Artifact(path=final, manifest=manifest.manifest, artifact_id=manifest.artifact_id)

    def delete(self, artifact_id: str) -> Path:
        """Remove an installed artifact and any staged push of it, then blobs nothing else lists.

        Raises NotFound only when there was neither an installed artifact nor a staged push.
        """
        check_artifact_id(artifact_id)
        with self.lock:
            if artifact_id in self.reserved:
                raise FailedPrecondition(f"artifact {artifact_id[:12]} is being pushed; try again after")
            path = self.artifacts / artifact_id
            staged = self.staging / artifact_id
            installed = (path / MANIFEST).is_file()
            if not installed and not staged.is_dir():
                raise NotFound(f"no artifact {artifact_id} on this device (installed or staged)")
            if installed:
                doomed = self.trash / f"{artifact_id}.{uuid.uuid4().hex[:8]}"
                path.rename(doomed)
                _remove(doomed)
            _remove(staged)
            self.gc()
            return path

    def gc(self) -> int:
        """Delete blobs no installed or staged manifest lists; return how many."""
        with self.lock:
            live: set[str] = set()
            for d in (self.artifacts, self.staging):
                for m in d.glob(f"*/{MANIFEST}"):
                    live.update(_listed_blobs(m))
            dead = [p for p in self.blobs.iterdir() if p.name not in live]
            for p in dead:
                p.unlink(missing_ok=True)
            return len(dead)

    def _write_new(self, path: Path, data: bytes) -> None:
        """Write data to a fresh file in tmp/ (O_EXCL, O_NOFOLLOW), fsync it, rename it to path.

        Why not `path.tmp`: a file of that name may be a hard link to a shared blob (S1); a fresh
        name created exclusively in a directory only the store writes can never be one.
        """
        tmp = self.tmp / f"write.{uuid.uuid4().hex}"
        write_fresh(tmp, data, 0o644)
        try:
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _listed_blobs(manifest_path: Path) -> set[str]:
    """The sha256 of every file a manifest lists, read leniently: an artifact of another schema
    version still owns its blobs until it is deleted."""
    try:
        files = json.loads(manifest_path.read_bytes()).get("files", [])
        return {str(f["sha256"]) for f in files if isinstance(f, dict) and "sha256" in f}
    except (OSError, ValueError, AttributeError):
        return set()


def _link(blob: Path, dst: Path) -> None:
    """Hard-link a blob into an artifact; fall back to a symlink where links are refused.

    Why the fallback: Android's SELinux policy forbids link(2) in app data directories on many
    phones (Termux's own coreutils work around it the same way).
    """
    try:
        os.link(blob, dst)
    except PermissionError:
        dst.symlink_to(os.path.relpath(blob, dst.parent))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _disk_error(err: OSError) -> Exception:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceExhausted(f"the device's disk is full: {err}")
    return err
