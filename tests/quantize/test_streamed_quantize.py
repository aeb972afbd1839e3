"""`edgellm quantize` streamed (issue 28): the whole-model build's figures and integers, one layer in memory.

Tiny random-weight checkpoints (tests/tiny_families.py): Llama (tied), Gemma-2 (final soft-cap,
tied, sliding window, norms of 1 + w), Phi-3 (fused qkv/gate_up, untied lm_head) and, for AWQ, Qwen2
(v_proj's bias, which its fold divides). Each plan is built twice: from the whole fp32 model with
whole-model forwards (a quantized copy), and from a streamed model quantized in place whose torch
columns walk the windows layer by layer (builder/layer_eval.py). AWQ's streamed export reads the
checkpoint with its folded norms and biases written over (export.link_checkpoint).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.builder.pipeline import Measure, build_artifact
from edgellm.host.convert.shards import write_patched
from edgellm.host.evaluate.evaluate import EvalConfig
from edgellm.host.quantize.export import link_checkpoint
from edgellm.host.quantize.plan import Calibration, preset, with_calibration
from edgellm.host.quantize.run import make_job, run_job
from tests.tiny_families import LAYERS, build_tiny, tiny_model, tokenizer_dir

EVAL = EvalConfig(tokens=384, context=192, stride=96)  # 4 windows, overlapping: each scored once
WEIGHTS = "llm.mnn.weight"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("streamed-quantize")
    built = {f: build_tiny(f, root / f) for f in ("llama", "gemma2", "phi3")}
    return built | {"qwen2": _with_biases(root / "qwen2"), "llama-bf16": _bf16(root / "llama-bf16")}


def _with_biases(out: Path) -> Path:
    """A tiny Qwen2 whose q/k/v biases are random (an initialised model's are zero), with as many KV
    heads as query heads: AWQ folds v_proj -> o_proj only then (under grouped-query attention v's
    channels are repeated into o_proj, no one-to-one scale), dividing v_proj's bias."""
    model = tiny_model("qwen2", num_key_value_heads=4)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0.0, 0.5)
    return _save(model, out)


def _bf16(out: Path) -> Path:
    """A tiny Llama stored in bf16, as most checkpoints on the hub are."""
    return _save(tiny_model("llama").to(torch.bfloat16), out)


def _save(model: torch.nn.Module, out: Path) -> Path:
    """Save ``model`` with the bundled tokenizer as a checkpoint directory, as build_tiny does."""
    import transformers

    model.save_pretrained(str(out))  # type: ignore[operator]
    transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir())).save_pretrained(str(out))
    return out


# GPTQ streams as RTN does and more (calibration passes): RTN runs on Llama here and in run_job's test.
# AWQ's fold rules: Gemma-2's norms of 1 + w, Phi-3's fused rows, Qwen2's bias (Llama's: the bf16 test).
CASES = [("llama", "rtn"), ("llama", "gptq"), ("gemma2", "gptq"), ("phi3", "gptq")]
CASES += [("gemma2", "awq"), ("phi3", "awq"), ("qwen2", "awq")]


@pytest.mark.parametrize(("family", "method"), CASES)
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
    assert got.manifest.quantization.awq_ratios == expected.manifest.quantization.awq_ratios
    if family == "qwen2":  # every layer folds q/k/v, v -> o (v_proj's bias), gate/up, up -> down
        assert len(got.manifest.quantization.awq_ratios) == 4 * LAYERS
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


def test_streamed_awq_of_a_bf16_checkpoint_exports_what_torch_evaluated(
    checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    """AWQ's folded norms are rounded to the checkpoint's bf16 before the layer runs on, so the gate's
    torch quantized reference and the MNN artifact compute the same model: their KL is that of a plan
    that folds nothing (RTN), the two engines' arithmetic (measured 3.9e-5 and 4.4e-5)."""
    gaps = {}
    for method in ("awq", "rtn"):
        plan = with_calibration(preset("int4", method=method, block=32), Calibration(samples=4, seq_len=48))
        loaded = LoadedModel.open(str(checkpoints["llama-bf16"]), EVAL, streamed=True)
        gate_only = Measure(evaluate=False, verify=True)
        built = build_artifact(loaded, plan, tmp_path / method, measure=gate_only, consume=True)
        assert bool(built.manifest.quantization.awq_ratios) == (method == "awq")
        assert built.manifest.checks is not None and built.manifest.checks.fidelity_prefill is not None
        gaps[method] = built.manifest.checks.fidelity_prefill.kl_mean
    assert gaps["awq"] < 2 * gaps["rtn"] + 1e-5, gaps


def test_a_patched_shard_holds_the_overrides_in_its_dtype_and_every_other_byte(tmp_path: Path) -> None:
    tensors = {"a.weight": torch.randn(8, dtype=torch.bfloat16), "b.weight": torch.randn(4, 3)}
    src = tmp_path / "model.safetensors"
    save_file(tensors, str(src), metadata={"format": "pt"})
    new = torch.randn(8)  # fp32: stored as the shard's bf16
    write_patched(src, tmp_path / "out.safetensors", {"a.weight": new})
    with safe_open(str(tmp_path / "out.safetensors"), framework="pt") as f:
        assert torch.equal(f.get_tensor("a.weight"), new.to(torch.bfloat16))
        assert torch.equal(f.get_tensor("b.weight"), tensors["b.weight"])
    assert (tmp_path / "out.safetensors").stat().st_size == src.stat().st_size
    with pytest.raises(ValueError, match="shape"):
        write_patched(src, tmp_path / "bad.safetensors", {"b.weight": torch.zeros(3, 4)})
    with pytest.raises(KeyError, match="no tensor"):
        write_patched(src, tmp_path / "bad.safetensors", {"c.weight": torch.zeros(1)})


def test_linking_a_checkpoint_copies_only_the_shards_it_writes_over(
    checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    source = checkpoints["qwen2"]
    norm = "model.layers.1.input_layernorm.weight"
    link_checkpoint(source, tmp_path / "staged", {norm: torch.full((64,), 0.5)})
    staged = sorted(p.name for p in (tmp_path / "staged").iterdir())
    assert "config.json" in staged and "model.safetensors" in staged
    assert (tmp_path / "staged" / "config.json").is_symlink()
    assert not (tmp_path / "staged" / "model.safetensors").is_symlink()
    with safe_open(str(tmp_path / "staged" / "model.safetensors"), framework="pt") as f:
        assert torch.equal(f.get_tensor(norm), torch.full((64,), 0.5))
    with pytest.raises(KeyError, match="no safetensors tensor"):
        link_checkpoint(source, tmp_path / "again", {"model.nothing.weight": torch.zeros(1)})
