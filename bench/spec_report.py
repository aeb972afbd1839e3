"""Per-kind report and acceptance bars of bench/bench_spec.py on the issue-31 prompt kinds.

Ratios are per prompt and paired (the same prompt in both modes: `fast` ÷ `off`, `auto` ÷ `off`,
llama.cpp lookup ÷ llama.cpp plain), then summarised per kind and half by their median and their
worst (lowest). Bars (issue 31, on the held-out half): copy and edit `fast` ≥ 1.3× plain (median);
no kind's `fast` median below 0.97× plain; `auto` token-identical to `off` on every prompt, both
halves.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from bench.spec_kinds import KINDS

HALVES = ("tune", "heldout")
COPY_BAR = 1.3  # held-out copy and edit kinds: fast ÷ plain, median
FLOOR_BAR = 0.97  # held-out, every kind: fast ÷ plain, median


@dataclass(frozen=True)
class Ratios:
    """Per-prompt ratios of one kind and half: median and worst."""

    median: float
    worst: float

    @classmethod
    def of(cls, values: list[float]) -> Ratios:
        """Median and minimum (nan when empty)."""
        if not values:
            return cls(float("nan"), float("nan"))
        return cls(statistics.median(values), min(values))

    def cell(self) -> str:
        """`1.23× (worst 0.91×)`."""
        return f"{self.median:.2f}× (worst {self.worst:.2f}×)"


@dataclass(frozen=True)
class KindRow:
    """Everything the table says about one kind and half."""

    kind: str
    half: str
    n: int
    plain_tps: float
    fast: Ratios
    auto: Ratios
    lookup: Ratios
    fast_cpu: Ratios  # the same ratios in process CPU time (bench_spec.edgellm_run says why)
    auto_cpu: Ratios
    lookup_cpu: Ratios
    llama_plain_tps: float
    auto_mismatches: int
    fast_identical: int
    fast_acceptance: str


def ratio(a: float, b: float) -> float:
    """a ÷ b, nan when b is 0."""
    return a / b if b else float("nan")


def kind_row(kind: str, half: str, edge: list[dict[str, Any]], llama: list[dict[str, Any]]) -> KindRow:
    """Summarise the greedy rows of one kind and half."""
    e = [r for r in edge if r["kind"] == kind and r["half"] == half and r["temperature"] == 0]
    ll = [r for r in llama if r["kind"] == kind and r["half"] == half and r["temperature"] == 0]
    drafted = sum(r["fast_drafted"] for r in e)
    accepted = sum(r["fast_accepted"] for r in e)
    return KindRow(
        kind=kind,
        half=half,
        n=len(e),
        plain_tps=statistics.median([r["plain_tps"] for r in e]) if e else float("nan"),
        fast=Ratios.of([ratio(r["fast_tps"], r["plain_tps"]) for r in e]),
        auto=Ratios.of([ratio(r["spec_tps"], r["plain_tps"]) for r in e]),
        lookup=Ratios.of([ratio(r["lookup_tps"], r["plain_tps"]) for r in ll]),
        fast_cpu=Ratios.of([ratio(r["fast_cpu_tps"], r["plain_cpu_tps"]) for r in e]),
        auto_cpu=Ratios.of([ratio(r["spec_cpu_tps"], r["plain_cpu_tps"]) for r in e]),
        lookup_cpu=Ratios.of([ratio(r["lookup_cpu_tps"], r["plain_cpu_tps"]) for r in ll]),
        llama_plain_tps=statistics.median([r["plain_tps"] for r in ll]) if ll else float("nan"),
        auto_mismatches=sum(not r["identical"] for r in e),
        fast_identical=sum(r["fast_identical"] for r in e),
        fast_acceptance=f"{ratio(accepted, drafted):.0%} of {drafted}" if drafted else "– of 0",
    )


def kind_rows(edge: list[dict[str, Any]], llama: list[dict[str, Any]]) -> list[KindRow]:
    """One row per kind and half that has results, kinds in KINDS order."""
    rows = [kind_row(k, h, edge, llama) for h in HALVES for k in KINDS]
    return [r for r in rows if r.n]


def table(rows: list[KindRow]) -> str:
    """Markdown: per kind and half, greedy; each ratio in wall time, then in CPU time."""
    lines = [
        "| kind | half | n | edgellm plain tok/s | fast ÷ plain | auto ÷ plain | llama.cpp plain tok/s "
        "| lookup ÷ llama plain | auto ≠ off | fast = off | fast acceptance |",
        "|---|---|---:|---:|---|---|---:|---|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.kind} | {r.half} | {r.n} | {r.plain_tps:.1f} | {r.fast.cell()}; CPU {r.fast_cpu.cell()} "
            f"| {r.auto.cell()}; CPU {r.auto_cpu.cell()} | {r.llama_plain_tps:.1f} "
            f"| {r.lookup.cell()}; CPU {r.lookup_cpu.cell()} | {r.auto_mismatches} "
            f"| {r.fast_identical}/{r.n} | {r.fast_acceptance} |"
        )
    return "\n".join(lines)


def bars(rows: list[KindRow], clock: str = "wall") -> list[tuple[str, bool, str]]:
    """(bar, met, measured) for each issue-31 bar, on `clock` (wall or cpu) rates; no rows: not met."""
    held = {r.kind: (r.fast_cpu if clock == "cpu" else r.fast).median for r in rows if r.half == "heldout"}
    out = []
    for kind in ("copy", "edit"):
        med = held.get(kind, float("nan"))
        out.append((f"held-out {kind}: fast ≥ {COPY_BAR}× plain (median)", med >= COPY_BAR, f"{med:.2f}×"))
    for kind in KINDS:
        med = held.get(kind, float("nan"))
        out.append((f"held-out {kind}: fast ≥ {FLOOR_BAR}× plain (median)", med >= FLOOR_BAR, f"{med:.2f}×"))
    mismatches = sum(r.auto_mismatches for r in rows)
    total = sum(r.n for r in rows)
    out.append(
        (
            "auto token-identical to off, every prompt",
            total > 0 and mismatches == 0,
            f"{mismatches}/{total} differ",
        )
    )
    return out


def bars_table(results: list[tuple[str, bool, str]]) -> str:
    """Markdown: each bar, met or not, and the figure."""
    lines = ["| bar | measured | |", "|---|---|---|"]
    lines += [f"| {name} | {figure} | {'met' if ok else '**not met**'} |" for name, ok, figure in results]
    return "\n".join(lines)
