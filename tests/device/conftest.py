"""Fixtures shared by the device tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.mnn import MnnEngine


@pytest.fixture(scope="module")
def engine(default_artifact: Path) -> Iterator[MnnEngine]:
    """The default artifact loaded in a real MNN engine (2 threads), one per test module."""
    e = MnnEngine(open_artifact(default_artifact), EngineConfig(threads=2))
    e.load()
    yield e
    e.close()
