"""Evaluation results as a terminal table, and the protocol behind the figures in words."""

from __future__ import annotations

from typing import Any


def table(rows: dict[str, dict[str, Any]], columns: tuple[str, ...] = ("ppl", "top1", "kl")) -> str:
    """Fixed-width table: one row per model, ppl / top-1 agreement with fp / KL vs fp ('-': not measured)."""
    head = f"{'model':<10}" + "".join(f"{c:>12}" for c in columns)
    lines = [head, "-" * len(head)]
    for name, res in rows.items():
        cells = []
        for c in columns:
            v = res.get(c)
            cells.append(f"{v:>12.4f}" if isinstance(v, float) else f"{'-' if v is None else v!s:>12}")
        lines.append(f"{name:<10}" + "".join(cells))
    return "\n".join(lines)


def protocol(evaluation: dict[str, Any]) -> str:
    """'first 2048 tokens of wikitext2-test.txt, windows of 512 every 256' for an evaluation record."""
    text = evaluation.get("text") or evaluation.get("text_file") or "wikitext2-test.txt"
    return (
        f"first {evaluation['tokens']} tokens of {text}, windows of {evaluation['context']} "
        f"tokens every {evaluation['stride']} (each token scored once)"
    )
