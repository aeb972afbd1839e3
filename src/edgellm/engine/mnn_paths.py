"""Check the file names an artifact's MNN config makes MNN open, before MNN sees them (finding S3).

MNN builds each path by plain concatenation (`base_dir + value`), so `../` or an absolute value
escapes the artifact, and a missing graph is not reported by `load()` but crashes the first
forward (SIGSEGV). So every path-valued key of `config.json` and of the `llm_config.json` MNN
merges into it must name a regular file the manifest lists, and the files MNN opens by a default
name must be listed too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgellm.common.errors import FailedPrecondition
from edgellm.common.manifest import ManifestInvalid, check_path

MNN_CONFIG = "config.json"
# Keys MNN reads as a file name relative to the config's directory, and the names it falls back to.
_DEFAULTS = {
    "llm_model": "llm.mnn",
    "llm_weight": "llm.mnn.weight",
    "tokenizer_file": "tokenizer.txt",
    "llm_config": "llm_config.json",
}
# Files MNN opens when they exist, without any key naming them.
_OPTIONAL_DEFAULTS = ("llm_config.json", "embeddings_bf16.bin")
# Why suffixes as well as names: MNN adds path keys release by release (block_model, lm_model,
# embedding_file, visual_model, mllm.*...); any key shaped like one is treated as one.
_PATH_SUFFIXES = ("_model", "_weight", "_file", "_config", "_dir", "_path")
_REFUSED_KEYS = ("base_dir",)  # would move every other path outside the artifact
_STORE_ID = re.compile(r"[0-9a-f]{64}")  # a store artifact's directory name: its manifest's sha256


def artifact_label(path: Path) -> str:
    """How messages name an artifact directory: a store artifact's id (12 digits), else the
    directory's own name; never the absolute path, which tells a client the device's layout (L9)."""
    return path.name[:12] if _STORE_ID.fullmatch(path.name) else repr(path.name)


def check_mnn_paths(artifact_dir: Path, listed: set[str]) -> None:
    """FailedPrecondition naming the key unless every file MNN would open is a listed artifact file."""
    config = _read(artifact_dir / MNN_CONFIG, MNN_CONFIG)
    merged: list[tuple[str, dict[str, Any]]] = [(MNN_CONFIG, config)]
    llm_config = config.get("llm_config", _DEFAULTS["llm_config"])
    if isinstance(llm_config, str) and llm_config in listed:
        merged.append((llm_config, _read(artifact_dir / llm_config, llm_config)))
    for source, doc in merged:
        for key, value in _path_values(doc):
            _check_one(source, key, value, listed)
    for key in ("llm_model", "llm_weight", "tokenizer_file"):
        if key not in config:
            _check_one(MNN_CONFIG, f"{key} (default)", _DEFAULTS[key], listed)
    for name in _OPTIONAL_DEFAULTS:
        if (artifact_dir / name).exists() or (artifact_dir / name).is_symlink():
            _check_one("the artifact directory", name, name, listed)


def _read(path: Path, name: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) else str(err)  # an OSError's text has the path
        raise FailedPrecondition(
            f"artifact {artifact_label(path.parent)}: {name} is not readable JSON: {why}"
        ) from err
    if not isinstance(doc, dict):
        raise FailedPrecondition(f"artifact {artifact_label(path.parent)}: {name} must be a JSON object")
    return doc


def _path_values(doc: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, object]]:
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if key in _REFUSED_KEYS:
            yield name, None  # always refused
        elif isinstance(value, dict):
            yield from _path_values(value, f"{name}.")
        elif (key in _DEFAULTS or key.endswith(_PATH_SUFFIXES)) and isinstance(value, str | list):
            yield name, value


def _check_one(source: str, key: str, value: object, listed: set[str]) -> None:
    values = value if isinstance(value, list) else [value]
    for v in values:
        if not isinstance(v, str):
            raise FailedPrecondition(f"{source}: {key} must be a file name inside the artifact, got {v!r}")
        try:
            name = check_path(v)
        except ManifestInvalid as err:
            raise FailedPrecondition(f"{source}: {key} = {v!r} points outside the artifact ({err})") from None
        if name not in listed:
            raise FailedPrecondition(
                f"{source}: {key} = {v!r} is not a file the artifact's manifest lists; rebuild the "
                "artifact (`edgellm convert`) or fix its config"
            )
