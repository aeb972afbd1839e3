"""Convert's memory savings keep their figures: the chunked gate perplexity, and consume's limits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.builder.pipeline import Measure, build_artifact
from edgellm.host.convert.verify import perplexity
from edgellm.host.quantize.plan import preset


def whole_array_perplexity(logits: np.ndarray, ids: list[int]) -> float:
    """The gate's perplexity as it was computed before chunking: one float64 copy of [T-1, V]."""
    x = logits[:-1].astype(np.float64)
    target = np.asarray(ids[1:])
    top = x.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(x - top).sum(axis=-1)) + top[:, 0]
    return float(math.exp((logz - x[np.arange(len(target)), target]).mean()))


def test_chunked_perplexity_equals_the_whole_array_formula_to_the_manifests_digits() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (301, 500)).astype(np.float32)  # 300 targets: 2 full chunks + a part
    ids = rng.integers(0, 500, 301).tolist()
    assert round(perplexity(logits, ids), 4) == round(whole_array_perplexity(logits, ids), 4)
    assert perplexity(logits, ids) == pytest.approx(whole_array_perplexity(logits, ids), rel=1e-12)


def test_consume_is_refused_where_the_fp_model_is_still_needed(
    tiny_model: LoadedModel, tmp_path: Path
) -> None:
    plan = preset("int4", method="rtn")
    with pytest.raises(ValueError, match="consume quantizes the fp model in place"):
        build_artifact(tiny_model, plan, tmp_path / "a", consume=True, measure=Measure(evaluate=True))
    assert not (tmp_path / "a").exists()
