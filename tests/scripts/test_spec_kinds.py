"""The issue-31 speculation prompt kinds (bench/prompts/spec_kinds.jsonl) and the bars bench_spec checks."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.spec_kinds import KINDS, PER_HALF, halves
from bench.spec_report import bars, kind_rows

KINDS_FILE = Path(__file__).resolve().parents[2] / "bench" / "prompts" / "spec_kinds.jsonl"


def rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in KINDS_FILE.read_text(encoding="utf-8").splitlines()]


def test_every_kind_has_a_full_tuning_and_held_out_half() -> None:
    count = Counter((r["kind"], r["half"]) for r in rows())
    assert count == {(k, h): PER_HALF for k in KINDS for h in ("tune", "heldout")}
    assert len({r["prompt"] for r in rows()}) == len(rows())


def test_no_passage_article_or_test_file_feeds_both_halves() -> None:
    def sources(half: str) -> set[str]:
        return {r["source"] for r in rows() if r["half"] == half and r["kind"] != "open"}

    assert not sources("tune") & sources("heldout")


def test_halves_keep_a_source_whole_and_balance_the_counts() -> None:
    assert halves([1, 1, 1, 2, 3, 3, 4]) == ["tune", "tune", "tune", "heldout", "heldout", "heldout", "tune"]


def result(kind: str, half: str, fast: float, identical: bool = True) -> dict[str, Any]:
    """One bench_spec greedy row with plain at 100 tok/s."""
    return {
        "kind": kind,
        "half": half,
        "temperature": 0.0,
        "plain_tps": 100.0,
        "fast_tps": 100.0 * fast,
        "spec_tps": 100.0,
        "plain_cpu_tps": 100.0,
        "fast_cpu_tps": 100.0,
        "spec_cpu_tps": 100.0,
        "identical": identical,
        "fast_identical": False,
        "fast_drafted": 10,
        "fast_accepted": 5,
    }


def test_the_bars_pass_only_when_copy_and_edit_pay_nothing_loses_and_auto_is_identical() -> None:
    good = [result(k, h, 1.4 if k in ("copy", "edit") else 1.0) for k in KINDS for h in ("tune", "heldout")]
    assert all(ok for _, ok, _ in bars(kind_rows(good, [])))
    slow_open = [*good[:-1], result("open", "heldout", 0.9)]
    failed = [name for name, ok, _ in bars(kind_rows(slow_open, [])) if not ok]
    assert failed == ["held-out open: fast ≥ 0.97× plain (median)"]
    differs = [*good, result("open", "tune", 1.0, identical=False)]
    assert [name for name, ok, _ in bars(kind_rows(differs, [])) if not ok] == [
        "auto token-identical to off, every prompt"
    ]
    assert not all(ok for _, ok, _ in bars(kind_rows([r for r in good if r["kind"] != "copy"], [])))
    assert not all(ok for _, ok, _ in bars(kind_rows(good, []), clock="cpu"))  # CPU rates: fast 1.0×
