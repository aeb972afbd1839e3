"""The operator-support table `edgellm scan` and `edgellm jobs scan` print (one layout for both)."""

from __future__ import annotations

from collections.abc import Sequence


def op_table(
    backend: str,
    ops: Sequence[tuple[str, int, bool]],
    fallback: Sequence[str],
    fallback_nodes: int,
    table_source: str,
) -> str:
    """OPS as (operator, node count, supported) rows, then what falls back and the table's source."""
    lines = [f"{'operator':<24}{'count':>7}  {backend}", "-" * 42]
    for op, count, supported in ops:
        lines.append(f"{op:<24}{count:>7}  {'yes' if supported else 'NO -> cpu fallback'}")
    summary = "all operators supported" if not fallback else f"unsupported: {', '.join(fallback)}"
    lines += ["", f"{summary} ({fallback_nodes} nodes fall back)", f"table: {table_source}"]
    return "\n".join(lines)
