"""Scoring windows, metrics, and evaluation determinism."""

from __future__ import annotations

import numpy as np
import pytest

from edgellm.common.score_table import table
from edgellm.host.evaluate.evaluate import EvalConfig, evaluate
from edgellm.host.evaluate.metrics import Accumulator, log_softmax
from edgellm.host.evaluate.scorers import ALL, Scorer
from edgellm.host.evaluate.windows import windows


def test_overlapping_windows_score_every_token_once() -> None:
    wins = windows(2048, 512, 256)
    assert wins[0].begin == 0 and wins[-1].end == 2048
    assert sum(w.n_scored for w in wins) == 2047
    assert all(w.end - w.begin <= 512 and w.n_scored < w.end - w.begin for w in wins)


def test_disjoint_windows_skip_each_windows_first_token() -> None:
    wins = windows(1024, 512, 512)
    assert [w.n_scored for w in wins] == [511, 511]


def test_bad_windows() -> None:
    with pytest.raises(ValueError, match="stride"):
        windows(100, 10, 20)


class _Fixed:
    """A deterministic fake model: logits depend only on position and token."""

    def __init__(self, noise: float) -> None:
        self.noise = noise

    def __call__(self, ids: list[int], rows: slice = ALL) -> np.ndarray:
        rng = np.random.default_rng(len(ids))
        base = rng.standard_normal((len(ids), 50)).astype(np.float32)
        out: np.ndarray = (base + self.noise * np.asarray(ids, dtype=np.float32)[:, None] / 50)[rows].copy()
        return out


def test_evaluate_reference_and_determinism() -> None:
    ids = list(np.random.default_rng(0).integers(0, 50, 300))
    cfg = EvalConfig(tokens=300, context=128, stride=64)
    scorers: dict[str, Scorer] = {"fp": _Fixed(0.0), "q": _Fixed(0.5)}
    a = evaluate(ids, scorers, cfg, "fp")
    b = evaluate(ids, scorers, cfg, "fp")
    assert a == b
    assert a["fp"]["kl"] == 0.0 and a["fp"]["top1"] == 1.0
    assert a["q"]["kl"] > 0 and a["q"]["tokens"] == 299
    assert "top1" in table(a)


def test_accumulator_matches_direct_perplexity() -> None:
    logits = np.random.default_rng(1).standard_normal((10, 7))
    targets = np.arange(10) % 7
    acc = Accumulator()
    acc.add(log_softmax(logits), targets, None)
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert acc.result()["ppl"] == pytest.approx(float(np.exp(-lp[np.arange(10), targets].mean())))
    with pytest.raises(FloatingPointError):
        acc.add(np.full((1, 7), np.nan), np.zeros(1, dtype=int), None)
