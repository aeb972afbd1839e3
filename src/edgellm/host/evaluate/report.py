"""The evaluation protocol behind the figures, in words (the table itself: common/score_table.py)."""

from __future__ import annotations

from typing import Any


def protocol(evaluation: dict[str, Any]) -> str:
    """'first 2048 tokens of wikitext2-test.txt, windows of 512 every 256' for an evaluation record."""
    text = evaluation.get("text") or evaluation.get("text_file") or "wikitext2-test.txt"
    return (
        f"first {evaluation['tokens']} tokens of {text}, windows of {evaluation['context']} "
        f"tokens every {evaluation['stride']} (each token scored once)"
    )
