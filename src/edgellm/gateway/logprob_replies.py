"""The daemon's TokenLogprob messages in OpenAI's two shapes: chat's `content[]` and the legacy lists.

Chat (`choices[].logprobs.content[]`): token, logprob, bytes and top_logprobs per generated token.
Completions (the legacy API, what lm-evaluation-harness parses): parallel lists `tokens`,
`token_logprobs`, `top_logprobs` (a token → logprob map per position) and `text_offset`; with
echo they start with the prompt's tokens, whose first has no logprob (null), as OpenAI's did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgellm.v1 import device_pb2

TokenLogprob = device_pb2.TokenLogprob


def token_text(raw: bytes) -> str:
    """A token's text; a token that is part of a UTF-8 character as OpenAI writes it ("bytes:\\xe2")."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


# OpenAI's number for a token that cannot be chosen; JSON has no -inf, which a constraint's or
# logit_bias's mask gives the alternatives it excludes (top_logprobs wider than what is allowed).
FLOOR = -9999.0


def _finite(value: float) -> float:
    return value if value > FLOOR else FLOOR


def _logprob(lp: TokenLogprob) -> float | None:
    return _finite(lp.logprob) if lp.HasField("logprob") else None


def chat_content(entries: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """`logprobs.content` entries for generated tokens."""
    return [
        {
            "token": token_text(lp.token),
            "logprob": _logprob(lp),
            "bytes": list(lp.token),
            "top_logprobs": [
                {"token": token_text(t.token), "logprob": _logprob(t), "bytes": list(t.token)} for t in lp.top
            ],
        }
        for lp in entries
    ]


def chat_logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    """A chat choice's `logprobs` object."""
    return {"content": chat_content(entries), "refusal": None}


def legacy_logprobs(entries: Sequence[TokenLogprob], start: int = 0) -> dict[str, Any]:
    """A completion choice's `logprobs` (tokens from character offset START of the choice's text)."""
    tokens, offsets = [], []
    seen = b""
    for lp in entries:
        # Offsets count characters of the text so far; a token inside a UTF-8 character starts
        # where that character does.
        offsets.append(start + len(seen.decode("utf-8", errors="ignore")))
        seen += lp.token
        tokens.append(token_text(lp.token))
    return {
        "tokens": tokens,
        "token_logprobs": [_logprob(lp) for lp in entries],
        "top_logprobs": [
            None if not lp.HasField("logprob") else {token_text(t.token): _finite(t.logprob) for t in lp.top}
            for lp in entries
        ],
        "text_offset": offsets,
    }


def prompt_text(entries: Sequence[TokenLogprob]) -> str:
    """The text of a prompt's tokens (what echo writes for a token-id prompt)."""
    return b"".join(lp.token for lp in entries).decode("utf-8", errors="replace")
