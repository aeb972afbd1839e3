"""The store on its own: manifest validation, quota/disk refusals, dedupe, delete, crash recovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgellm.common.errors import InvalidArgument, NotFound, ResourceExhausted
from edgellm.device.store import ArtifactStore, check_path, parse_manifest
from tests.manifests import manifest_doc, manifest_for


def _manifest(files: dict[str, bytes], name: str = "m") -> str:
    return manifest_for(files, name).to_json()


def _install(store: ArtifactStore, files: dict[str, bytes], name: str = "m") -> str:
    m = parse_manifest(_manifest(files, name))
    store.begin(m)
    for f in m.files:
        part = store.part(m.artifact_id, f.sha256)
        part.write_bytes(files[f.path])
        store.commit_blob(part, f.sha256)
    return store.install(m).artifact_id


@pytest.mark.parametrize(
    "name",
    ["/etc/passwd", "../x", "a/../../x", "a\x00b", "a\\b", "C:/x", "a//b", "./a", "a/.", "", "manifest.json"],
)
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument):
        check_path(name)


def _with_files(entries: list[dict[str, object]]) -> str:
    doc = manifest_doc({"x": b"x"})
    doc["files"] = entries
    return json.dumps(doc)


def test_link_entries_and_bad_fields_are_refused() -> None:
    sha = "0" * 64
    for entry in (
        {"path": "a", "size": 1, "sha256": sha, "type": "symlink"},
        {"path": "a", "size": 1, "sha256": sha, "link": "/etc/passwd"},
        {"path": "a", "size": -1, "sha256": sha},
        {"path": "a", "size": True, "sha256": sha},
        {"path": "a", "size": 1, "sha256": "XYZ"},
    ):
        with pytest.raises(InvalidArgument):
            parse_manifest(_with_files([entry]))
    dup = [{"path": "a", "size": 1, "sha256": sha}, {"path": "a", "size": 1, "sha256": sha}]
    with pytest.raises(InvalidArgument, match="twice"):
        parse_manifest(_with_files(dup))
    nested = [{"path": "a", "size": 1, "sha256": sha}, {"path": "a/b", "size": 1, "sha256": sha}]
    with pytest.raises(InvalidArgument, match="directory"):
        parse_manifest(_with_files(nested))


def test_identical_files_are_stored_once(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "s")
    shared = b"w" * 1000
    a = _install(store, {"weights.bin": shared, "x": b"1"}, "a")
    b = _install(store, {"w/weights.bin": shared, "x": b"2"}, "b")
    assert len(list(store.blobs.iterdir())) == 3
    assert {x.artifact_id for x in store.installed()} == {a, b}
    store.delete(a)
    assert len(list(store.blobs.iterdir())) == 2  # the shared blob stays: b still lists it
    assert (store.artifacts / b / "w" / "weights.bin").read_bytes() == shared
    with pytest.raises(NotFound):
        store.delete(a)


def test_quota_and_free_disk_are_checked_up_front(tmp_path: Path) -> None:
    m = parse_manifest(_manifest({"a": b"x" * 5000}))
    quota = ArtifactStore(tmp_path / "q", quota_bytes=4000)
    with pytest.raises(ResourceExhausted, match="quota"):
        quota.reserve(m, quota.status(m))
    small = ArtifactStore(tmp_path / "d", free_bytes=lambda _p: 4096)
    with pytest.raises(ResourceExhausted, match="free disk"):
        small.reserve(m, small.status(m))
    roomy = ArtifactStore(tmp_path / "r", free_bytes=lambda _p: 1 << 30)
    assert roomy.reserve(m, roomy.status(m)) == 5000


def test_half_built_installs_are_cleaned_on_start(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "s")
    (store.tmp / "abc.123").mkdir()
    (store.tmp / "abc.123" / "f").write_bytes(b"x")
    (store.trash / "old").mkdir()
    store = ArtifactStore(tmp_path / "s")
    assert not list(store.tmp.iterdir())
    assert not list(store.trash.iterdir())
    assert store.installed() == []


def test_s9_default_quota_and_reserve(tmp_path: Path) -> None:
    """S9: with no quota given, the store may use half the free disk (plus what it holds), and a
    push always leaves at least 1 GiB (or 5 % of the filesystem) free; explicit values win."""
    from edgellm.device.store.store import default_limits, disk_free

    quota, reserve = default_limits(tmp_path / "s", None, None)
    free = disk_free(tmp_path)
    assert reserve >= 1 << 30
    assert abs(quota - free // 2) < 64 << 20
    assert default_limits(tmp_path / "s", 0, 5) == (0, 5)


def test_byte_sizes_parse() -> None:
    import argparse

    from edgellm.common.argtypes import byte_size

    assert [byte_size(t) for t in ("0", "512M", "8G", "1.5k", "2GiB")] == [
        0,
        512 << 20,
        8 << 30,
        1536,
        2 << 30,
    ]
    for bad in ("x", "-1G", "inf"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(bad)


def test_s21_gc_waits_for_a_running_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S21: gc (DeleteArtifact) cannot scan between an install's rename and its staging removal,
    where it used to count the new artifact's blobs as dead."""
    import threading

    import edgellm.device.store.store as store_module

    store = ArtifactStore(tmp_path / "s")
    files = {"a": b"1" * 100, "b": b"2" * 10}
    m = parse_manifest(_manifest(files))
    store.begin(m)
    for f in m.files:
        part = store.part(m.artifact_id, f.sha256)
        part.write_bytes(files[f.path])
        store.commit_blob(part, f.sha256)
    real_fsync = store_module._fsync_dir
    seen: list[str] = []

    def racing_gc(path: Path) -> None:  # runs inside install, after the rename
        gc = threading.Thread(target=store.gc)
        gc.start()
        gc.join(0.3)
        seen.append("waited" if gc.is_alive() else "ran inside the install")
        real_fsync(path)

    monkeypatch.setattr(store_module, "_fsync_dir", racing_gc)
    store.install(m)
    monkeypatch.setattr(store_module, "_fsync_dir", real_fsync)
    store.gc()
    assert seen == ["waited"]
    assert all(store.has_blob(f.sha256, f.size) for f in m.files)
