"""bench/model_fit_table.py: a bench_scale measurement replaces the prediction's figures, its growth kept."""

from __future__ import annotations

import json
from pathlib import Path

from bench.model_fit_table import GB, SHAPES, from_measured, measured_rows
from edgellm.engine.memory_model import Prediction


def test_measured_figures_replace_the_prediction_and_keep_its_growth() -> None:
    p = Prediction(artifact=1, loaded=100, load_peak=150, at_context={2048: 120, 8192: 200})
    m = {
        "artifact GiB": 2.0,
        "E RSS load t1 GiB": 3.0,
        "E RSS load t2 GiB": None,  # a thread count not served
        "E RSS peak t1 GiB": 3.5,
        "E RSS peak t2 GiB": 3.25,
    }
    got = from_measured(p, m)
    assert (got.artifact, got.loaded) == (2 * GB, 3 * GB)
    assert got.load_peak == 3 * GB + 50  # the predicted load overhead on the measured RSS
    assert got.at_context == {2048: int(3.5 * GB), 8192: int(3.5 * GB) + 80}


def test_only_measured_rows_of_known_shapes_are_taken(tmp_path: Path) -> None:
    rows = {
        "llama-3.2-1b": {"label": "measured"},
        "llama-3.1-8b": {"label": "extrapolated per parameter from ..."},
        "unknown-9b": {"label": "measured"},
    }
    path = tmp_path / "scale.json"
    path.write_text(json.dumps({"rows": rows}))
    assert list(measured_rows(path)) == ["Llama-3.2-1B"]
    assert "Llama-3.2-1B" in SHAPES
