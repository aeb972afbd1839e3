"""Host paths of an artifact's source: kept beside the manifest on the host, never in it.

The manifest goes to the phone with every push, so it carries the source's names only (the GGUF
file's or checkpoint directory's name, its sha256, the calibration text's file name). Where those
live on the building host (the GGUF file, the fp checkpoint `edgellm eval` compares against, the
calibration text) is written to HOST_SOURCE inside the artifact directory: a hidden file, which
`list_files` skips, so the manifest never lists it and a push never sends it. Artifacts built
before this file existed keep the paths in their manifest; `edgellm convert --force` rebuilds
them without.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from edgellm.common.manifest import ArtifactManifest, Source

HOST_SOURCE = ".host-source.json"


def for_device(source: Source) -> Source:
    """The source as the manifest carries it: the file and directory names, no host path."""
    return replace(source, path=Path(source.path).name, hf_dir=Path(source.hf_dir).name)


def write_host_source(artifact_dir: Path, source: Source, calibration: Path | None = None) -> Path:
    """Record where `source` (and the calibration text) live on this host, in `artifact_dir`/HOST_SOURCE."""
    target = artifact_dir / HOST_SOURCE
    tmp = target.with_name(f"{HOST_SOURCE}.tmp-{os.getpid()}")
    doc = {"path": source.path, "hf_dir": source.hf_dir, "calibration_file": str(calibration or "")}
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    tmp.replace(target)
    return target


def host_hf_dir(artifact_dir: Path, manifest: ArtifactManifest) -> Path:
    """The fp checkpoint `artifact_dir` was built from, as this host knows it (the sidecar, else the
    manifest of an artifact built before the sidecar existed)."""
    try:
        doc = json.loads((artifact_dir / HOST_SOURCE).read_text(encoding="utf-8"))
        return Path(str(doc["hf_dir"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Path(manifest.source.hf_dir)
