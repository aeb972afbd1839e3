"""The torch reference computes the attention its model defines: Gemma-2's soft-capped logits (issue 28).

transformers' default `sdpa` attention drops `attn_logit_softcapping`; only `eager` applies it. The
gate and the evaluation compare MNN against this reference, so every place that loads it (the
whole-model load, the streamed skeleton, the evaluation's runners) asks for `eager` where the
config sets a cap. Tiny random-weight checkpoints (tests/tiny_families.py), no download.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from edgellm.host.builder.loaded import load_model
from edgellm.host.convert.shards import skeleton
from edgellm.host.quantize.families import torch_attention
from tests.tiny_families import build_tiny


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny("gemma2", tmp_path_factory.mktemp("gemma2"))


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    # q/k scaled 24x: attention logits of std ~4, where the cap (50) bends the largest ones
    for layer in model.model.layers:  # type: ignore[union-attr]
        layer.self_attn.q_proj.weight.data *= 24
        layer.self_attn.k_proj.weight.data *= 24
    with torch.no_grad():
        out: torch.Tensor = model(ids).logits
    return out


def test_only_a_capped_config_asks_for_eager_attention(gemma2: Path, tmp_path: Path) -> None:
    assert torch_attention(gemma2) == {"attn_implementation": "eager"}
    assert torch_attention(build_tiny("llama", tmp_path / "llama")) == {}
    assert torch_attention(tmp_path / "missing") == {}  # the loader says what is wrong, not this


def test_the_loaded_reference_applies_gemma2s_attention_cap(gemma2: Path) -> None:
    ids = torch.randint(0, 1000, (1, 48), generator=torch.Generator().manual_seed(0))
    model, _ = load_model(gemma2)
    assert model.config._attn_implementation == "eager"
    ours = _logits(model, ids)
    eager = _logits(AutoModelForCausalLM.from_pretrained(str(gemma2), attn_implementation="eager"), ids)
    sdpa = _logits(AutoModelForCausalLM.from_pretrained(str(gemma2), attn_implementation="sdpa"), ids)
    assert torch.equal(ours, eager)
    # the test can tell them apart: without the cap the logits move (measured up to 1.35)
    assert (sdpa - eager).abs().max() > 0.1


def test_the_streamed_skeleton_uses_the_same_attention(gemma2: Path) -> None:
    config = skeleton(gemma2).config
    assert config._attn_implementation == "eager"  # type: ignore[union-attr]
