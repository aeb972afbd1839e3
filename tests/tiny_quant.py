"""Tiny random-initialised Llama models (real SmolLM2 tokenizer) and one real exported artifact.

Imported by the conftest of every test directory that needs them; results are memoised per
process so the artifact is exported once even when several directories run together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from edgellm.host.builder.loaded import LoadedModel

_MEMO: dict[str, Any] = {}


def _tokenizer_dir() -> Path:
    from edgellm.host.builder.source import checkpoint, resolve_source

    return checkpoint(resolve_source("default"))


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama (hidden 64, GQA, tied embeddings) saved with the real tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if "hf" in _MEMO:
        return Path(_MEMO["hf"])
    out = tmp_path_factory.mktemp("tiny-hf")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=49152,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(cfg).save_pretrained(str(out))  # type: ignore[no-untyped-call]
    AutoTokenizer.from_pretrained(str(_tokenizer_dir())).save_pretrained(str(out))
    _MEMO["hf"] = out
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_hf: Path) -> LoadedModel:
    """The tiny model loaded for quantization, with a short evaluation."""
    from edgellm.host.evaluate.evaluate import EvalConfig

    if "loaded" not in _MEMO:
        _MEMO["loaded"] = LoadedModel.open(str(tiny_hf), EvalConfig(tokens=192, context=96, stride=48))
    loaded: LoadedModel = _MEMO["loaded"]
    return loaded


@pytest.fixture(scope="session")
def tiny_artifact(
    tiny_model: LoadedModel, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """A real MNN artifact of the tiny model: GPTQ, `mixed` plan, block 32, small calibration."""
    from edgellm.host.builder.pipeline import build_artifact
    from edgellm.host.quantize.plan import Calibration, preset, with_calibration

    plan = with_calibration(preset("mixed", method="gptq", block=32), Calibration(samples=8, seq_len=64))
    if "artifact" not in _MEMO:
        out = tmp_path_factory.mktemp("tiny-art") / "art"
        _MEMO["artifact"] = (out, build_artifact(tiny_model, plan, out).summary())
    artifact: tuple[Path, dict[str, Any]] = _MEMO["artifact"]
    return artifact
