"""The artifact's own chat template, as llmexport wrote it into `llm_config.json["jinja"]`.

The daemon renders plain chats with MNN's C++ jinja, which takes (role, content) pairs only; the
gateway renders conversations with tools itself (transformers' semantics, gateway/tools/template.py)
and needs the template's source for that: `ArtifactInfo.chat_template` carries it, with the
vocabulary's single tokens the template names (`tokens`), so the gateway's tool grammar can write a
call tag such as Mistral's `[TOOL_CALLS]` as the one token the model was trained to emit.
`has_chat_template` tells a client whether the artifact is chat-tuned (a chat-tuned model completing
raw text often ends at once: SmolLM2-135M-Instruct gives "What is the capital of France?" 0 tokens
raw and "The capital of France is Paris." as a user message).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from edgellm.common.logs import get_logger
from edgellm.common.token_table import TokenTable
from edgellm.engine.artifact import Artifact
from edgellm.engine.mnn_paths import MNN_CONFIG

log = get_logger(__name__)
LLM_CONFIG = "llm_config.json"
# Why a cap: the template travels in every GetStatus; real ones are 1-10 KiB (Llama-3.1's ~5 KiB).
MAX_TEMPLATE_CHARS = 64 * 1024
# Why a cap: the tokens travel in every GetStatus too; a template names a handful (Qwen2.5's 6).
MAX_TOKENS = 64


@dataclass(frozen=True)
class ChatTemplate:
    """A jinja chat template and the special tokens transformers passes to it."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    # text -> id of each single (added) token the template names: see `named_tokens`
    tokens: MappingProxyType[str, int] = field(default_factory=lambda: MappingProxyType({}))


def chat_template(artifact: Artifact) -> ChatTemplate | None:
    """The artifact's template (config.json's `jinja` over llm_config.json's, as MNN merges them)."""
    listed = frozenset(f.path for f in artifact.manifest.files)
    template = _read(artifact.path, artifact.artifact_id, listed)
    hf = artifact.manifest.tokenizer.hf_tokenizer
    if template is None or hf is None or hf not in listed:
        return template
    tokens = named_tokens(artifact.path / hf, artifact.token_table, template.source, artifact.artifact_id)
    return replace(template, tokens=MappingProxyType(tokens))


@functools.lru_cache(maxsize=16)
def named_tokens(tokenizer_json: Path, token_table: Path, source: str, artifact_id: str) -> dict[str, int]:
    """The added tokens (special or not) of TOKENIZER_JSON whose text SOURCE names, by text, where
    the token table agrees (its bytes for that id are the text: the device's stream then carries the
    tag the parsers read). Read once per artifact (~0.1 s for Qwen2.5's 7 MB tokenizer.json)."""
    try:
        added = json.loads(tokenizer_json.read_bytes()).get("added_tokens") or []
        table = TokenTable(token_table)
    except (OSError, ValueError, AttributeError) as err:
        log.warning("chat_tokens_unreadable", artifact=artifact_id[:12], error=str(err))
        return {}
    found = (_named(tok, source, table) for tok in added if isinstance(tok, dict))
    return dict(list(filter(None, found))[:MAX_TOKENS])


def _named(tok: dict[str, object], source: str, table: TokenTable) -> tuple[str, int] | None:
    """(text, id) of one added token when SOURCE names it and TABLE holds its text at its id."""
    text, tid = tok.get("content"), tok.get("id")
    if not isinstance(text, str) or not text or text not in source or not isinstance(tid, int):
        return None
    return (text, tid) if 0 <= tid < len(table) and table.bytes_of(tid) == text.encode() else None


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
