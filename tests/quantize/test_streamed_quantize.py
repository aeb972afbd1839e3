"""`edgellm quantize` streamed (issue 28): the whole-model build's figures and integers, one layer in memory.

Tiny random-weight checkpoints (tests/tiny_families.py): Llama (tied), Gemma-2 (final soft-cap,
tied, sliding window) and Phi-3 (fused qkv/gate_up, untied lm_head). Each plan is built twice: from
the whole fp32 model with whole-model forwards (a quantized copy), and from a streamed model
quantized in place whose torch columns walk the windows layer by layer (builder/layer_eval.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.builder.pipeline import Measure, build_artifact
from edgellm.host.evaluate.evaluate import EvalConfig
from edgellm.host.quantize.plan import Calibration, preset, with_calibration
from edgellm.host.quantize.run import make_job, run_job
from tests.tiny_families import build_tiny

EVAL = EvalConfig(tokens=384, context=192, stride=96)  # 4 windows, overlapping: each scored once
WEIGHTS = "llm.mnn.weight"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("streamed-quantize")
    return {f: build_tiny(f, root / f) for f in ("llama", "gemma2", "phi3")}


@pytest.mark.parametrize("family", ["llama", "gemma2", "phi3"])
@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_streamed_quantize_equals_the_whole_model_build(
    family: str, method: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    plan = with_calibration(preset("int4", method=method, block=32), Calibration(samples=4, seq_len=48))
    whole = LoadedModel.open(str(checkpoints[family]), EVAL)
    expected = build_artifact(whole, plan, tmp_path / "whole", measure=Measure(evaluate=True))
    streamed = LoadedModel.open(str(checkpoints[family]), EVAL, streamed=True)
    assert streamed.stream is not None
    got = build_artifact(streamed, plan, tmp_path / "streamed", measure=Measure(evaluate=True), consume=True)
    assert streamed.stream.max_live == 1
    assert (tmp_path / "streamed" / WEIGHTS).read_bytes() == (tmp_path / "whole" / WEIGHTS).read_bytes()
    assert expected.manifest.evaluation is not None and got.manifest.evaluation is not None
    want, have = expected.manifest.evaluation.results, got.manifest.evaluation.results
    assert want.keys() == have.keys() == {"fp", "torch", "mnn"}
    for column, figures in want.items():
        assert figures.keys() == have[column].keys()
        for name, value in figures.items():
            assert have[column][name] == pytest.approx(value, rel=1e-4, abs=1e-5), (column, name)


def test_run_job_builds_a_plan_streamed_with_the_whole_models_figures(
    checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    hf = str(checkpoints["llama"])
    job = make_job(hf, "int4", tmp_path / "rtn", evaluation=EVAL, method="rtn", block=32, device="cpu")
    loaded = LoadedModel.open(hf, EVAL)
    whole = build_artifact(loaded, job.plan, tmp_path / "whole").summary()
    streamed = run_job(job)
    assert streamed["evaluation"]["results"]["mnn"] == whole["evaluation"]["results"]["mnn"]
    assert (tmp_path / "rtn" / WEIGHTS).read_bytes() == (tmp_path / "whole" / WEIGHTS).read_bytes()
