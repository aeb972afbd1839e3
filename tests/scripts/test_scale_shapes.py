"""bench/scale_shapes.py copies real models: each shape's parameter count is the published one."""

from __future__ import annotations

import pytest

from bench.scale_report import extrapolate, params_of

# Total parameters as the models' safetensors report them (tied embeddings counted once).
PUBLISHED = {
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "gemma-2-2b": 2_614_341_888,
    "phi-3.5-mini": 3_821_079_552,
    "llama-3.1-8b": 8_030_261_248,
}


@pytest.mark.parametrize("shape", sorted(PUBLISHED))
def test_each_shape_has_the_published_parameter_count(shape: str) -> None:
    assert params_of(shape) == PUBLISHED[shape]


def test_extrapolation_is_linear_in_parameters_for_sizes_and_for_time_per_token() -> None:
    known = [
        (1e9, {"convert s": 10.0, "E decode t1": 20.0}),
        (3e9, {"convert s": 30.0, "E decode t1": 20 / 3}),
    ]
    row = extrapolate(6e9, known)  # type: ignore[arg-type]
    assert row["convert s"] == pytest.approx(60.0)
    assert row["E decode t1"] == pytest.approx(20 / 6)  # 1/rate is linear: time per token
    assert row["gptq s"] is None  # no measurement, no figure
