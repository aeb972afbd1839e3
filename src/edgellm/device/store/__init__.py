"""The device's content-addressed artifact store (blobs, staging, atomic installs)."""

from edgellm.device.store.manifest import FileEntry, PushManifest, check_path, parse_manifest
from edgellm.device.store.store import ArtifactStore, FileState, StoreStatus, disk_free

__all__ = [
    "ArtifactStore",
    "FileEntry",
    "FileState",
    "PushManifest",
    "StoreStatus",
    "check_path",
    "disk_free",
    "parse_manifest",
]
