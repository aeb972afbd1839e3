"""llmcompressor's integers carried into our grid: same codes, ``[zero, scale] = [-zp·scale, scale]``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edgellm.host.quantize.plan import preset
from edgellm.host.quantize.reference_import import load_reference, reference_weights


def _compressed_tensors_style(w: torch.Tensor, group: int) -> dict[str, torch.Tensor]:
    """Asymmetric int4 groups as compressed-tensors stores them: q in -8..7, integer zero points."""
    oc, ic = w.shape
    x = w.reshape(oc, ic // group, group)
    lo, hi = x.amin(-1).clamp(max=0), x.amax(-1).clamp(min=0)
    scale = (hi - lo) / 15
    zp = torch.clamp(torch.round(-8 - lo / scale), -8, 7)
    q = torch.clamp(torch.round(x / scale[..., None]) + zp[..., None], -8, 7)
    return {
        "codes": (q + 8).to(torch.uint8).reshape(oc, ic),
        "scale": scale,
        "zero_point": zp.to(torch.int16),
    }


def test_reference_codes_dequantize_to_what_compressed_tensors_computes() -> None:
    w = torch.randn(8, 128)
    saved = {"linears": {"l": _compressed_tensors_style(w, 64)}}
    q = reference_weights(saved, 64)["l"]
    ct = saved["linears"]["l"]
    expect = ((ct["codes"].float() - 8).reshape(8, 2, 64) - ct["zero_point"].float()[..., None]) * ct[
        "scale"
    ][..., None]
    torch.testing.assert_close(q.dequantize(), expect.reshape(8, 128), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="groups of 64"):
        reference_weights(saved, 32)


def test_load_reference_sets_the_model_to_the_carried_integers(tiny_hf: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_hf))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["model.norm.weight"] *= 2  # AWQ-style change outside the linears travels too
    linears = {
        n: _compressed_tensors_style(m.weight.detach(), 32)
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and n != "lm_head"
    }
    file = tmp_path / "ref.pt"
    torch.save({"state": state, "linears": linears, "meta": {}}, file)
    qweights = load_reference(model, file, preset("int4", method="gptq", block=32))
    assert set(qweights) == {*linears, "lm_head"}
    name = "model.layers.0.mlp.down_proj"
    assert torch.equal(model.get_parameter(f"{name}.weight"), qweights[name].dequantize())
    assert torch.equal(model.get_parameter("model.norm.weight"), state["model.norm.weight"])
    assert qweights["lm_head"].bits == 8
