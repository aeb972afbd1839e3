"""Checkpoint inputs: sharded bf16/fp16/fp32 safetensors load, and export reads the source shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from edgellm.host.builder.loaded import load_model
from edgellm.host.quantize.export import link_checkpoint
from tests.tiny_families import tiny_model, tokenizer_dir


def _save(out: Path, dtype: torch.dtype) -> Path:
    """A tiny qwen2 checkpoint in ``dtype``, sharded into ~100 KB safetensors files."""
    import transformers

    tiny_model("qwen2").to(dtype).save_pretrained(str(out), max_shard_size="100KB")
    transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir())).save_pretrained(str(out))
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_sharded_checkpoint_loads_in_fp32_with_the_saved_values(tmp_path: Path, dtype: torch.dtype) -> None:
    hf = _save(tmp_path / "ckpt", dtype)
    assert len(list(hf.glob("*.safetensors"))) > 2 and (hf / "model.safetensors.index.json").is_file()
    model, _ = load_model(hf)
    reference = tiny_model("qwen2").to(dtype)
    for name, p in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], p.to(torch.float32)), name
    assert next(model.parameters()).dtype == torch.float32


def test_export_staging_links_the_source_weights_and_config(tmp_path: Path) -> None:
    hf = _save(tmp_path / "ckpt", torch.bfloat16)
    staging = tmp_path / "stage"
    link_checkpoint(hf, staging)
    staged = {p.name for p in staging.iterdir()}
    shards = {p.name for p in hf.glob("*.safetensors")}
    assert shards | {"config.json", "generation_config.json", "model.safetensors.index.json"} == staged
    assert all((staging / n).is_symlink() and (staging / n).resolve() == (hf / n).resolve() for n in staged)
    assert not any(n.startswith("tokenizer") for n in staged)  # copied by export_artifact, never linked
    assert json.loads((staging / "config.json").read_text())["dtype"] == "bfloat16"


def test_a_sharded_bf16_checkpoint_converts_and_passes_the_gate(tmp_path: Path) -> None:
    from edgellm.host.convert.pipeline import convert

    hf = _save(tmp_path / "ckpt", torch.bfloat16)
    manifest = convert(str(hf), tmp_path / "artifact", bits=8, lm_bits=8)
    assert manifest.checks is not None and manifest.quantization.round_trip_exact
    assert manifest.model.architecture == "qwen2"
