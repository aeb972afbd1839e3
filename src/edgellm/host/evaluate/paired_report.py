"""The paired evaluation as tables: perplexity per path and deltas, each with its 95% interval."""

from __future__ import annotations

from typing import Any


def _cell(iv: dict[str, float] | None, fmt: str = "{:.3f}", signed: bool = False) -> str:
    if iv is None:
        return ""
    f = fmt.replace("{:", "{:+") if signed else fmt
    return f"{f.format(iv['value'])} [{f.format(iv['low'])}, {f.format(iv['high'])}]"


def markdown(result: dict[str, Any]) -> str:
    """One row per model: ppl per path, Δ vs fp, Δ vs baseline, share of the baseline's increase removed."""
    paths = result["protocol"]["paths"]
    base = result.get("baseline") or "baseline"
    head = ["model"]
    for p in paths:
        head += [f"{p} ppl", f"{p} Δ vs fp", f"{p} Δ vs {base}", f"{p} removed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in result["models"].items():
        cells = [name]
        for p in paths:
            r = row[p]
            removed = r.get("removed_of_baseline_increase")
            cells += [
                _cell(r["ppl"]),
                _cell(r.get("delta_vs_fp"), signed=True),
                _cell(r.get("delta_vs_baseline"), signed=True),
                _cell(removed, "{:.0%}") if removed else "",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    for pair, by_path in result.get("pairs", {}).items():
        pair_cells = "; ".join(f"{p} {_cell(iv, signed=True)}" for p, iv in by_path.items())
        lines.append(f"\nppl({pair.replace(' - ', ') − ppl(')}): {pair_cells}")
    proto = result["protocol"]
    lines.append(
        f"\n{result['scored_tokens']} scored tokens in {result['documents']} documents of the "
        f"{proto['slice']} slice (≤ {proto['doc_tokens']} tokens each); prefill windows "
        f"{proto['context']}/{proto['stride']}; 95% paired block bootstrap "
        f"({proto['bootstrap_block']}-token blocks)."
    )
    return "\n".join(lines)
