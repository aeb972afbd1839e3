"""OpenAI's logprobs options → GenerateParams fields, and prompts as OpenAI's completions take them.

Chat: `logprobs` (bool) and `top_logprobs` (0..20). Completions (the legacy API): `logprobs`
(0..20 alternatives; null = none), `echo` (the prompt, scored, before the completion) and a
prompt that is a string, a list of strings, a list of token ids or a list of those: what
lm-evaluation-harness's `local-completions` model sends to score loglikelihood tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgellm.gateway.errors import invalid

MAX_TOP_LOGPROBS = 20  # OpenAI's chat limit; the daemon's too
MAX_PROMPTS = 64  # prompts in one /v1/completions request (each is one Generate on the device)
UINT32 = 2**32

Prompt = str | tuple[int, ...]


@dataclass(frozen=True)
class Scoring:
    """What an answer reports: None = no logprobs, else that many alternatives per token; echo:
    the prompt (with its logprobs) comes before the completion."""

    top: int | None = None
    echo: bool = False

    def fields(self) -> dict[str, Any]:
        """The GenerateParams fields that ask the device for these numbers."""
        return {
            "logprobs": self.top is not None,
            "top_logprobs": self.top or 0,
            # echo always scores the prompt: the device's prompt tokens carry the echoed text too.
            "prompt_logprobs": self.echo,
        }


def chat_scoring(body: dict[str, Any]) -> Scoring:
    """`logprobs` and `top_logprobs` of a chat request."""
    on = body.get("logprobs")
    if on is not None and not isinstance(on, bool):
        raise invalid(f"'logprobs' must be a boolean, got {type(on).__name__}", "logprobs")
    top = _count(body, "top_logprobs")
    if top and not on:  # 0 asks for nothing (as before logprobs were served)
        raise invalid("'top_logprobs' needs 'logprobs' set to true", "top_logprobs")
    return Scoring(top or 0) if on else Scoring()


def completion_scoring(body: dict[str, Any]) -> Scoring:
    """`logprobs` (a count) and `echo` of a completions request (streamed: the prompt is the first chunk)."""
    top = _count(body, "logprobs")
    echo = body.get("echo")
    if echo is not None and not isinstance(echo, bool):
        raise invalid(f"'echo' must be a boolean, got {type(echo).__name__}", "echo")
    return Scoring(top, bool(echo))


def _count(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise invalid(f"'{key}' must be an integer between 0 and {MAX_TOP_LOGPROBS}, got {value!r}", key)
    return value


def prompts(body: dict[str, Any], max_chars: int) -> tuple[Prompt, ...]:
    """A completion's prompts: one string, a list of strings, token ids, or a list of token-id lists."""
    raw = body.get("prompt")
    if isinstance(raw, str) or (isinstance(raw, list) and raw and _is_ids(raw)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise invalid("'prompt' must be a non-empty string, token-id list, or a list of those", "prompt")
    if len(raw) > MAX_PROMPTS:
        raise invalid(f"'prompt' holds {len(raw)} prompts; at most {MAX_PROMPTS} per request", "prompt")
    return tuple(_one(p, i, max_chars) for i, p in enumerate(raw))


def _is_ids(items: list[Any]) -> bool:
    return all(isinstance(t, int) and not isinstance(t, bool) for t in items)


def _one(prompt: Any, i: int, max_chars: int) -> Prompt:
    where = f"prompt[{i}]"
    if isinstance(prompt, str):
        if not prompt:
            raise invalid(f"'{where}' is empty", "prompt")
        if len(prompt) > max_chars:
            cap = f"the gateway's cap is {max_chars}"
            raise invalid(f"'{where}' has {len(prompt)} characters; {cap}", "prompt")
        return prompt
    if not isinstance(prompt, list) or not prompt or not _is_ids(prompt):
        raise invalid(f"'{where}' must be a non-empty string or a list of token ids", "prompt")
    if len(prompt) > max_chars or not all(0 <= t < UINT32 for t in prompt):
        raise invalid(f"'{where}' must hold at most {max_chars} token ids, each >= 0", "prompt")
    return tuple(prompt)
