"""Well-known locations: repository root, data directory, artifact cache."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]  # src/edgellm/common/paths.py → the checkout


def data_dir() -> Path:
    """WikiText-2 location: $EDGELLM_DATA_DIR, else the project's shared/data beside the checkout."""
    env = os.environ.get("EDGELLM_DATA_DIR")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "data"


def cache_dir() -> Path:
    """Where built artifacts are cached: $EDGELLM_CACHE_DIR, else <repo>/.cache."""
    env = os.environ.get("EDGELLM_CACHE_DIR")
    return Path(env) if env else REPO_ROOT / ".cache"


def default_artifact_dir() -> Path:
    """The cached default artifact built by `edgellm convert --model default`."""
    return cache_dir() / "artifacts" / "default"
