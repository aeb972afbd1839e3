"""The lifecycle's memory across restarts, as small JSON files in the data directory.

`loaded.json`: the model loaded last, reloaded at start. `loading.json`: present while MNN loads, so
a native crash is known at the next start. `directories.json`: artifact directories loaded from
outside the store, so ListModels keeps showing them after a switch (while they exist).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from edgellm.common.errors import EdgeError
from edgellm.common.logs import get_logger
from edgellm.engine.artifact import Artifact, open_artifact

log = get_logger(__name__)


def same_load(crashed: dict[str, str], path: Path, artifact_id: object = None) -> bool:
    """Whether a crashed-load record names this artifact (an unreadable record names every one)."""
    if not crashed:
        return True
    return crashed.get("path") == str(path) or crashed.get("artifact_id") in (artifact_id, path.name)


def _record(artifact: Artifact) -> dict[str, str]:
    return {"path": str(artifact.path), "artifact_id": artifact.artifact_id}


class LoadRecords:
    """Reads and writes the three records under `data_dir`; `store_artifacts` is the store's own."""

    def __init__(self, data_dir: Path, store_artifacts: Path) -> None:
        self.loaded_file = data_dir / "loaded.json"
        self.loading_file = data_dir / "loading.json"
        self.directories_file = data_dir / "directories.json"
        self.store_artifacts = store_artifacts

    def mark_loading(self, artifact: Artifact) -> None:
        """A load is about to hand the artifact to MNN."""
        _write_json(self.loading_file, _record(artifact))

    def clear_loading(self) -> None:
        """The load returned (a Python-level failure is not a crash)."""
        self.loading_file.unlink(missing_ok=True)

    def crashed_last_load(self) -> dict[str, str] | None:
        """The load ({path, artifact_id}) under way when the daemon last died, if any; clears it."""
        try:
            record = json.loads(self.loading_file.read_text())
        except (OSError, ValueError):
            return None
        self.loading_file.unlink(missing_ok=True)
        log.error("last_load_crashed", record=record, action="not reloading it at start; LoadModel retries")
        return {str(k): str(v) for k, v in record.items()} if isinstance(record, dict) else {}

    def last_loaded(self) -> dict[str, object] | None:
        """The record of the model loaded before the last shutdown, if any."""
        try:
            record = json.loads(self.loaded_file.read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def remember(self, artifact: Artifact | None) -> None:
        """Remember the loaded artifact for restarts (None: forget), and a directory it came from."""
        if artifact is None:
            self.loaded_file.unlink(missing_ok=True)
            return
        _write_json(self.loaded_file, _record(artifact))
        if artifact.path.resolve().parent != self.store_artifacts.resolve():
            known = [p for p in _read_list(self.directories_file) if Path(p).is_dir()]
            if str(artifact.path) not in known:
                _write_json(self.directories_file, [*known, str(artifact.path)])

    def directories(self) -> list[Artifact]:
        """Artifact directories loaded from outside the store that still open (ListModels shows them)."""
        out = []
        for path in _read_list(self.directories_file):
            with contextlib.suppress(EdgeError, OSError, ValueError):
                out.append(open_artifact(Path(path)))
        return out


def _read_list(path: Path) -> list[str]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def _write_json(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)
