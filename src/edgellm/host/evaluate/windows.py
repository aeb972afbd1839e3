"""Fixed-context, fixed-stride scoring windows over a token stream (HF's sliding-window recipe)."""

from __future__ import annotations

from dataclasses import dataclass

from edgellm.common.errors import InvalidArgument


@dataclass(frozen=True)
class Window:
    """Feed ``ids[begin:end]``; score only its last ``n_scored`` predictions."""

    begin: int
    end: int
    n_scored: int


def windows(n_tokens: int, context: int, stride: int) -> list[Window]:
    """Windows of ``context`` tokens every ``stride``; every token after the first is scored once."""
    if not 0 < stride <= context:
        raise InvalidArgument(f"need 0 < stride ({stride}) <= context ({context})")
    if n_tokens < 2:
        raise InvalidArgument("need at least 2 tokens")
    out = []
    scored_to = 1  # token 0 is never a target
    begin = 0
    while scored_to < n_tokens:
        end = min(begin + context, n_tokens)
        # A window's first token has no context inside it: with stride == context it goes unscored.
        out.append(Window(begin, end, min(end - scored_to, end - begin - 1)))
        scored_to = end
        begin += stride
    return out
