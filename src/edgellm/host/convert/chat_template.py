"""The model's own chat template, proven at build time: the device renders what transformers renders.

The device renders prompts with MNN's C++ jinja (``llm_config.json["jinja"]``, written by
llmexport from the tokenizer's template) and encodes them with ``tokenizer.mtok``. This module
renders four canonical conversations both ways and refuses the artifact at the first differing
token, and decides how the template treats a system message: MNN's ``raise_exception`` is a no-op
(Gemma-2's "System role not supported" renders a ``system`` turn instead of refusing), so the
manifest records ``system_role`` and the daemon refuses what the template would have refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import structlog

from edgellm.host.convert.llmexport_adapter import ExportFailed

log = structlog.get_logger(__name__)

SystemRole = Literal["supported", "fold", "refuse"]
Conversation = tuple[tuple[str, str], ...]

_SYSTEM = ("system", "You are a terse assistant. Answer in one line.")
_USER = ("user", "What is the capital of France?  Say it with an emoji: 🦊 naïve\nthanks")
_ASSISTANT = ("assistant", "Paris.")
_FOLLOW_UP = ("user", "And of Italy?")
# Why these four: every branch a plain chat takes in the families' templates (first turn with and
# without a system message, a later turn after an assistant reply with and without one). The user
# text carries a double space, non-ASCII, an emoji and a newline: where byte-level and
# sentencepiece tokenizers differ.
CONVERSATIONS: tuple[Conversation, ...] = (
    (_USER,),
    (_SYSTEM, _USER),
    (_SYSTEM, _USER, _ASSISTANT, _FOLLOW_UP),
    (_USER, _ASSISTANT, _FOLLOW_UP),
)


def has_template(tokenizer: Any) -> bool:
    """Whether the tokenizer carries a chat template (base models have none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def reference_ids(tokenizer: Any, messages: Sequence[tuple[str, str]]) -> list[int]:
    """transformers' prompt ids for MESSAGES, ending with the assistant's generation prompt."""
    out = tokenizer.apply_chat_template(
        [{"role": r, "content": c} for r, c in messages], add_generation_prompt=True, tokenize=True
    )
    ids = out["input_ids"] if not isinstance(out, list) else out  # transformers 5 returns a BatchEncoding
    return [int(i) for i in ids]


def _render(tokenizer: Any, messages: Sequence[tuple[str, str]]) -> str | None:
    """The template's text for MESSAGES, or None where the template raises."""
    from jinja2.exceptions import TemplateError

    try:
        text = tokenizer.apply_chat_template(
            [{"role": r, "content": c} for r, c in messages], add_generation_prompt=True, tokenize=False
        )
    except TemplateError:
        return None
    return str(text)


def system_role(tokenizer: Any) -> SystemRole:
    """How the template takes a system message: its own turn, folded into the first user turn, or refused.

    "fold" when system + user renders exactly as one user turn holding both texts (Gemma-3);
    "refuse" when the template raises (Gemma-2) or drops the system text.
    """
    system, user = _SYSTEM[1], _USER[1]
    with_system = _render(tokenizer, (_SYSTEM, _USER))
    if with_system is None or system not in with_system:
        return "refuse"
    if with_system == _render(tokenizer, (("user", f"{system}\n\n{user}"),)):
        return "fold"
    return "supported"


def conversations_for(role: SystemRole) -> tuple[Conversation, ...]:
    """The canonical conversations a template with this system role can render."""
    if role == "refuse":
        return tuple(c for c in CONVERSATIONS if c[0][0] != "system")
    return CONVERSATIONS


def check_conformance(artifact: Path, tokenizer: Any, role: SystemRole) -> int:
    """Open the staged artifact with MNN and compare its prompt ids with transformers'; return the count.

    Raises ExportFailed naming the conversation and the first differing token.
    """
    from edgellm.common.mnn_llm import MnnLlm

    llm = MnnLlm.open(artifact / "config.json", {"thread_num": 1})
    checked = 0
    for messages in conversations_for(role):
        want = reference_ids(tokenizer, messages)
        got = llm.encode(llm.apply_chat_template(messages))
        if got != want:
            raise ExportFailed(_mismatch(tokenizer, messages, want, got))
        checked += 1
    log.info("chat_template_conformance", conversations=checked, system_role=role)
    return checked


def _mismatch(tokenizer: Any, messages: Sequence[tuple[str, str]], want: list[int], got: list[int]) -> str:
    at = next(
        (i for i, (w, g) in enumerate(zip(want, got, strict=False)) if w != g), min(len(want), len(got))
    )

    def token(ids: list[int]) -> str:
        return f"{ids[at]} {tokenizer.convert_ids_to_tokens(ids[at])!r}" if at < len(ids) else "(end)"

    roles = "+".join(r for r, _ in messages)
    return (
        f"the device renders the chat template differently from transformers for {roles}: first "
        f"difference at token {at} of {len(want)}: transformers {token(want)}, MNN {token(got)}; "
        "the model's template uses something MNN's jinja does not implement"
    )
