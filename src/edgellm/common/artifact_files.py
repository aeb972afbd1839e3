"""An artifact directory's files: list and hash them, write and read its manifest, publish it atomically."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from pathlib import Path

from edgellm.common.errors import FailedPrecondition, NotFound
from edgellm.common.hashing import sha256_file
from edgellm.common.manifest import MANIFEST, ArtifactManifest, FileEntry


def list_files(artifact_dir: Path) -> tuple[FileEntry, ...]:
    """Every regular file under ``artifact_dir`` (nested too), hashed; not hidden ones nor the manifest."""
    entries = []
    for path in sorted(p for p in artifact_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(artifact_dir)
        if rel.as_posix() == MANIFEST or any(part.startswith(".") for part in rel.parts):
            continue
        entries.append(FileEntry(rel.as_posix(), path.stat().st_size, sha256_file(path)))
    return tuple(entries)


def write_manifest(artifact_dir: Path, manifest: ArtifactManifest) -> Path:
    """Write ``manifest.json`` into ``artifact_dir`` atomically (temp file, then rename)."""
    target = artifact_dir / MANIFEST
    tmp = target.with_name(f".{MANIFEST}.tmp-{os.getpid()}")
    tmp.write_text(manifest.to_json(), encoding="utf-8")
    tmp.replace(target)
    return target


def read_manifest(artifact_dir: Path) -> tuple[ArtifactManifest, bytes]:
    """The validated manifest of ``artifact_dir`` and its exact bytes (whose sha256 is the artifact id)."""
    path = artifact_dir / MANIFEST
    if not path.is_file():
        raise NotFound(
            f"no artifact at {artifact_dir}: {MANIFEST} missing (build one with `edgellm convert`)"
        )
    raw = path.read_bytes()
    return ArtifactManifest.from_json(raw), raw


def verify_files(artifact_dir: Path, manifest: ArtifactManifest) -> None:
    """Raise FailedPrecondition unless the files on disk are exactly those listed, byte for byte."""
    actual = {entry.path: entry for entry in list_files(artifact_dir)}
    expected = {entry.path: entry for entry in manifest.files}
    if set(actual) != set(expected):
        missing = sorted(set(expected) - set(actual))
        unexpected = sorted(set(actual) - set(expected))
        raise FailedPrecondition(
            f"{artifact_dir}: file set differs: missing {missing}, unexpected {unexpected}"
        )
    for path, entry in expected.items():
        if actual[path] != entry:
            raise FailedPrecondition(f"{artifact_dir}: {path} differs from the manifest (size or sha256)")


def publish(staging: Path, out_dir: Path, *, force: bool = False) -> Path:
    """Move a complete ``staging`` directory to ``out_dir``; with ``force``, atomically replace it.

    Replacing swaps the two directories in one ``renameat2(RENAME_EXCHANGE)`` where the kernel has
    it (Linux >= 3.15), so a reader sees the old artifact or the new one, never neither; elsewhere
    the old directory is renamed aside first (two renames, no copy, nothing deleted before the new
    one is in place).
    """
    if not out_dir.exists():
        staging.replace(out_dir)
        return out_dir
    if not force:
        raise FileExistsError(f"{out_dir} exists (pass --force to replace it)")
    if _exchange(staging, out_dir):
        shutil.rmtree(staging, ignore_errors=True)  # now holds the old artifact
        return out_dir
    old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
    out_dir.replace(old)
    staging.replace(out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return out_dir


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where renameat2/RENAME_EXCHANGE is unavailable."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))
