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
