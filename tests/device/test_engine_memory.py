"""MNN keeps a module per multi-token forward length once anything was decoded; the engine must not."""

from __future__ import annotations

import numpy as np
import pytest

from edgellm.engine.mnn import MnnEngine

CLONE_WARNING = "module need new clone"


def test_continuation_prefills_of_new_lengths_clone_no_module(
    engine: MnnEngine, capfd: pytest.CaptureFixture[str]
) -> None:
    """A session's later turns (prefill after decode) of five lengths: no clone, positions exact."""
    engine.reset()
    logits = engine.prefill(engine.encode("The sea was calm that night, and"))
    for _ in range(3):
        logits = engine.decode(int(np.argmax(logits)))
    capfd.readouterr()
    text = "and then the boats sailed far away past the old lighthouse on the hill"
    for n in range(2, 7):  # each turn a distinct length: each used to cost a cloned module (~5 MiB)
        ids = engine.encode(" " + " ".join(text.split()[:n]))
        logits = engine.prefill(ids)
        logits = engine.decode(int(np.argmax(logits)))
    out = capfd.readouterr().out
    assert CLONE_WARNING not in out
    assert engine.llm.all_seq_len == engine.position == len(engine.history)


def test_scoring_prefills_clone_one_module_once_and_leave_plain_prefills_as_they_were(
    engine: MnnEngine, capfd: pytest.CaptureFixture[str]
) -> None:
    """prefill_all switches all_logits on for one forward: one clone at first use, none after, and
    the plain prefill and decode that follow are bit-identical to those before."""
    ids = engine.encode("The sea was calm that night, and the boats sailed far away")
    engine.reset()
    before = engine.prefill(ids)
    after_decode = engine.decode(int(np.argmax(before)))
    engine.reset()
    capfd.readouterr()
    for n in (len(ids), 5, 9):  # three lengths
        rows = engine.prefill_all(ids[:n])
        assert rows.shape == (n, engine.vocab_size)
        engine.reset()
    assert capfd.readouterr().out.count(CLONE_WARNING) <= 1  # 0 when an earlier test made it
    for n in (5, 9):
        engine.prefill_all(ids[:n])
        engine.reset()
    assert CLONE_WARNING not in capfd.readouterr().out
    plain = engine.prefill(ids)
    assert np.array_equal(plain, before)
    assert np.array_equal(engine.decode(int(np.argmax(plain))), after_decode)
    engine.reset()
