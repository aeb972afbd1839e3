"""The artifact's own chat template, as llmexport wrote it into `llm_config.json["jinja"]`.

The daemon renders plain chats with MNN's C++ jinja, which takes (role, content) pairs only; the
gateway renders conversations with tools itself (transformers' semantics, gateway/tools/template.py)
and needs the template's source for that: `ArtifactInfo.chat_template` carries it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

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
