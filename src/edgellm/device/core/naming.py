"""Naming models: which artifact a request's or LoadModel's name means (name, id, or id prefix)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from edgellm.common.errors import FailedPrecondition, NotFound
from edgellm.device.store import ArtifactStore
from edgellm.engine.artifact import Artifact

# Why 8: a model named by an id prefix must be unambiguous among a handful of artifacts and
# still be typeable; 8 hex digits (32 bits) is what `git` shows by default, and the store agrees.
MIN_ID_PREFIX = 8


def names(artifact: Artifact, name: str) -> bool:
    """Whether `name` is the artifact's name, its id, or a prefix of its id (MIN_ID_PREFIX+ digits)."""
    by_prefix = len(name) >= MIN_ID_PREFIX and artifact.artifact_id.startswith(name)
    return name in (artifact.name, artifact.artifact_id) or by_prefix


def check_named(loaded: Artifact | None, name: str = "") -> Artifact:
    """The loaded artifact, checking that a request's `model` (name, id or id prefix) names it."""
    if loaded is None:
        raise FailedPrecondition(
            "no model is loaded; load one with `edgellm load` or start the daemon with --model"
        )
    if name and not names(loaded, name):
        raise NotFound(f"model {name!r} is not loaded (loaded: {loaded.name} {loaded.artifact_id[:12]})")
    return loaded


def resolve_name(
    name: str, store: ArtifactStore, directories: Iterable[Artifact], allow_dir_load: bool
) -> Path:
    """A LoadModel name: installed artifact (id, prefix, name), a loaded-before directory, or a path.

    A path is accepted only when the daemon runs with --allow-dir-load (S6): without it, only
    what went through PushArtifact's checks, or what the operator loaded at start, loads.
    """
    if not name:
        raise FailedPrecondition("name the model to load: an artifact id, its name, or a directory")
    with contextlib.suppress(NotFound):
        return store.resolve_dir(name)
    for art in directories:
        if names(art, name):
            return art.path
    if "/" in name:
        if not allow_dir_load:
            raise FailedPrecondition(
                f"{name!r} is a directory: LoadModel loads installed artifacts only (push it with "
                "`edgellm push`), unless the daemon was started with --allow-dir-load"
            )
        if Path(name).is_dir():
            return Path(name)
    raise NotFound(f"no installed artifact or artifact directory called {name!r} (see `edgellm models`)")
