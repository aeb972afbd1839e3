"""Evaluation scores as a terminal table: `edgellm eval`, `edgellm quantize` and `edgellm jobs` print it."""

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
