"""Dumping a graph with pymnn's converter must not run pip (its logger installs an SDK and phones home)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from edgellm.host.quantize.mnn_weights import graph_json


def test_graph_dump_never_runs_pip(
    tiny_artifact: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    artifact, _ = tiny_artifact
    assert not (artifact / "llm.mnn.json").exists()  # so graph_json runs the converter
    # A `pip` first on PATH that records its calls: MNN.tools.utils.log runs `pip install -U
    # aliyun-log-python-sdk` through os.system when the SDK is missing.
    calls = tmp_path / "pip-calls"
    for name in ("pip", "pip3"):
        fake = tmp_path / "bin" / name
        fake.parent.mkdir(exist_ok=True)
        fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    graph = graph_json(artifact)
    assert graph["oplists"] and not calls.exists()
