"""The artifact's own chat template, as llmexport wrote it into `llm_config.json["jinja"]`.

The daemon renders plain chats with MNN's C++ jinja, which takes (role, content) pairs only; the
gateway renders conversations with tools itself (transformers' semantics, gateway/tools/template.py)
and needs the template's source for that: `ArtifactInfo.chat_template` carries it.
`has_chat_template` tells a client whether the artifact is chat-tuned (a chat-tuned model completing
raw text often ends at once: SmolLM2-135M-Instruct gives "What is the capital of France?" 0 tokens
raw and "The capital of France is Paris." as a user message).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgellm.common.logs import get_logger
from edgellm.engine.artifact import Artifact
from edgellm.engine.mnn_paths import MNN_CONFIG

log = get_logger(__name__)
LLM_CONFIG = "llm_config.json"
# Why a cap: the template travels in every GetStatus; real ones are 1-10 KiB (Llama-3.1's ~5 KiB).
MAX_TEMPLATE_CHARS = 64 * 1024


@dataclass(frozen=True)
class ChatTemplate:
    """A jinja chat template and the special tokens transformers passes to it."""

    source: str
    bos_token: str = ""
    eos_token: str = ""


def chat_template(artifact: Artifact) -> ChatTemplate | None:
    """The artifact's template (config.json's `jinja` over llm_config.json's, as MNN merges them)."""
    listed = frozenset(f.path for f in artifact.manifest.files)
    return _read(artifact.path, artifact.artifact_id, listed)


@functools.lru_cache(maxsize=16)
def _read(root: Path, artifact_id: str, listed: frozenset[str]) -> ChatTemplate | None:
    """Read once per artifact (the id is its manifest's hash: the files cannot change under it)."""
    for name in (MNN_CONFIG, LLM_CONFIG):
        if name not in listed:
            continue
        try:
            jinja = json.loads((root / name).read_bytes()).get("jinja")
        except (OSError, ValueError, AttributeError) as err:
            log.warning("chat_template_unreadable", artifact=artifact_id[:12], file=name, error=str(err))
            return None
        if isinstance(jinja, dict) and isinstance(jinja.get("chat_template"), str):
            return _template(jinja, artifact_id)
    return None


def _template(jinja: dict[str, object], artifact_id: str) -> ChatTemplate | None:
    source = str(jinja["chat_template"])
    if len(source) > MAX_TEMPLATE_CHARS:
        log.warning("chat_template_too_long", artifact=artifact_id[:12], chars=len(source))
        return None
    bos, eos = jinja.get("bos"), jinja.get("eos")
    return ChatTemplate(source, bos if isinstance(bos, str) else "", eos if isinstance(eos, str) else "")


@functools.lru_cache(maxsize=64)
def has_chat_template(artifact_dir: Path, artifact_id: str = "") -> bool:
    """True when the MNN config (or the llm_config.json it merges) holds a non-empty chat template.

    Cached per directory and artifact id (its manifest's sha256): GetStatus asks once a second
    for the gateway's telemetry, and an artifact's files do not change under one id.
    """
    config = _read_json(artifact_dir / MNN_CONFIG)
    name = config.get("llm_config", LLM_CONFIG)
    merged = {**(_read_json(artifact_dir / name) if isinstance(name, str) else {}), **config}
    jinja = merged.get("jinja")
    template = jinja.get("chat_template") if isinstance(jinja, dict) else None
    return any(isinstance(t, str) and t.strip() for t in (template, merged.get("prompt_template")))


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from path; {} when it is missing or not an object (open_artifact checks files)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}
