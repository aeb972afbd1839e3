"""The conversion gate on a real tiny artifact: a faithful export passes, a wrong RoPE base fails."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edgellm.common.manifest import ArtifactManifest
from edgellm.host.convert.pipeline import convert
from edgellm.host.convert.verify import ConversionCheckFailed, verify
from tests.tiny_families import build_tiny

_MEMO: dict[str, tuple[Path, ArtifactManifest]] = {}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ArtifactManifest]:
    """A peaked tiny Llama (RoPE base 100,000, sharp attention), converted at 8 bits: dir and manifest."""
    if "llama" not in _MEMO:
        root = tmp_path_factory.mktemp("gate")
        hf = _sharpen_attention(build_tiny("llama", root / "hf"))
        _MEMO["llama"] = (hf, convert(str(hf), root / "art", bits=8))
    return _MEMO["llama"]


def _sharpen_attention(hf: Path, gain: float = 8.0) -> Path:
    """Scale q and k so attention depends on position: random init gives near-uniform attention,
    which no RoPE error changes (a 10x wrong base moved KL by 1.8e-4 only)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(hf))
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(gain)
            layer.self_attn.k_proj.weight.mul_(gain)
    model.save_pretrained(str(hf))
    return hf


def test_a_faithful_tiny_export_passes_with_its_fidelity_recorded(
    tiny_llama: tuple[Path, ArtifactManifest],
) -> None:
    checks = tiny_llama[1].checks
    assert checks is not None and checks.fidelity_decode is not None and checks.fidelity_prefill is not None
    for fid in (checks.fidelity_prefill, checks.fidelity_decode):
        assert set(fid.kl_by_position) == {"0-63", "64-511", "512+"}
        assert fid.n_clear > 512 and fid.top1_clear == 1.0  # peaked: torch is confident at most positions
        assert checks.max_kl is not None and fid.kl_mean < checks.max_kl / 5


def test_an_artifact_with_the_wrong_rope_base_fails_naming_kl_and_the_position_bucket(
    tiny_llama: tuple[Path, ArtifactManifest],
) -> None:
    """The defect llmexport once had (docs/llmexport.md): the graph's RoPE base is not the checkpoint's.

    Here the artifact keeps base 100,000 and the checkpoint says 10,000: right at position 0,
    wrong from position 1 on.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf, _ = tiny_llama
    other = AutoModelForCausalLM.from_pretrained(
        str(hf), rope_parameters={"rope_type": "default", "rope_theta": 10000.0}
    )
    assert other.config.rope_parameters["rope_theta"] == 10000.0
    art = hf.parent / "art"
    with pytest.raises(ConversionCheckFailed) as err:
        verify(art, other, AutoTokenizer.from_pretrained(str(hf)))
    message = str(err.value)
    assert "fidelity check failed" in message and "mean KL(torch‖MNN)" in message
    # A 10x wrong base is wrong from position 1 on: the first bucket is the worst (a wrong llama3
    # scaling, which moves only the low frequencies, rises with position instead).
    assert "KL by position bucket 0-63" in message and "worst at positions 0-63" in message
