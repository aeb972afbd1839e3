"""The device's content-addressed artifact store (blobs, staging, atomic installs)."""

from edgellm.common.manifest import FileEntry, check_path
from edgellm.common.push_manifest import PushManifest, parse_manifest
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
