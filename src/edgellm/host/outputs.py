"""Where host jobs may write: Quantize outputs stay inside the artifacts root and only ever
replace an earlier edgellm artifact (finding S10: `output_dir` was any path, and the finished job
`rmtree`d whatever directory was there)."""

from __future__ import annotations

from pathlib import Path

from edgellm.common.errors import FailedPrecondition, PermissionDenied
from edgellm.common.manifest import MANIFEST, ManifestInvalid, load_json


def is_edgellm_artifact(path: Path) -> bool:
    """True for a directory whose manifest.json is an edgellm manifest (schema_version + files).

    Why not the typed `ArtifactManifest`: it refuses other schema versions, and an artifact an
    older or newer edgellm built is still one this job may replace.
    """
    manifest = path / MANIFEST
    if path.is_symlink() or not path.is_dir() or not manifest.is_file():
        return False
    try:
        doc = load_json(manifest.read_bytes())
    except (OSError, ManifestInvalid):
        return False
    return isinstance(doc, dict) and "schema_version" in doc and isinstance(doc.get("files"), list)


def check_replaceable(output: Path) -> None:
    """Refuse to write OUTPUT when something other than an edgellm artifact is there."""
    if output.is_symlink() or (output.exists() and not is_edgellm_artifact(output)):
        raise FailedPrecondition(
            f"{output} exists and is not an edgellm artifact (no edgellm manifest.json); "
            "refusing to replace it: pick another output directory or remove it yourself"
        )


def confine_output(output_dir: str, root: Path) -> Path:
    """OUTPUT_DIR (relative: under ROOT) as a path inside ROOT that may be replaced; else refuse."""
    if not output_dir:
        raise PermissionDenied("output_dir is required: a name under the host's artifacts directory")
    requested = Path(output_dir)
    path = requested if requested.is_absolute() else root / requested
    real_root = root.resolve()
    resolved = path.resolve()
    if real_root not in resolved.parents:
        raise PermissionDenied(
            f"output_dir {output_dir!r} is outside the host's artifacts directory {real_root}; give a "
            "name inside it (or start `edgellm host --artifacts-dir DIR`)"
        )
    check_replaceable(resolved)
    return resolved
