"""Where Quantize may write (finding S10): inside the artifacts root, replacing only edgellm artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgellm.common.errors import FailedPrecondition, PermissionDenied
from edgellm.host.outputs import check_replaceable, confine_output


def test_outputs_stay_inside_the_root_and_replace_only_artifacts(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    root.mkdir()
    assert confine_output("new", root) == (root / "new").resolve()
    for outside in ("/etc", "../x", str(tmp_path), "a/../../x"):
        with pytest.raises(PermissionDenied, match="outside"):
            confine_output(outside, root)
    (root / "link").symlink_to(tmp_path)  # a symlink inside the root that leads out
    with pytest.raises(PermissionDenied):
        confine_output("link/victim", root)
    (root / "photos").mkdir()
    (root / "photos" / "a.jpg").write_bytes(b"\xff")
    with pytest.raises(FailedPrecondition, match="not an edgellm artifact"):
        confine_output("photos", root)
    old = root / "old"
    old.mkdir()
    (old / "manifest.json").write_text(json.dumps({"schema_version": 1, "files": []}))
    assert confine_output("old", root) == old.resolve()
    check_replaceable(root / "absent")  # nothing there: fine
