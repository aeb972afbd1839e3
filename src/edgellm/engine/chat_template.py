"""Whether an artifact carries a chat template: what tells a client to send its prompt as a message.

MNN renders chat with the template the exporter wrote into `llm_config.json` (`jinja.chat_template`;
MNN releases before 3.x used a plain `prompt_template`). A chat-tuned model completing raw text
often ends its answer at once: SmolLM2-135M-Instruct gives "What is the capital of France?" 0
tokens raw and "The capital of France is Paris." as a user message.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from edgellm.engine.mnn_paths import MNN_CONFIG

_LLM_CONFIG = "llm_config.json"


@functools.lru_cache(maxsize=64)
def has_chat_template(artifact_dir: Path, artifact_id: str = "") -> bool:
    """True when the MNN config (or the llm_config.json it merges) holds a non-empty chat template.

    Cached per directory and artifact id (its manifest's sha256): GetStatus asks once a second
    for the gateway's telemetry, and an artifact's files do not change under one id.
    """
    config = _read(artifact_dir / MNN_CONFIG)
    name = config.get("llm_config", _LLM_CONFIG)
    merged = {**(_read(artifact_dir / name) if isinstance(name, str) else {}), **config}
    jinja = merged.get("jinja")
    template = jinja.get("chat_template") if isinstance(jinja, dict) else None
    return any(isinstance(t, str) and t.strip() for t in (template, merged.get("prompt_template")))


def _read(path: Path) -> dict[str, Any]:
    """A JSON object from path; {} when it is missing or not an object (open_artifact checks files)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}
