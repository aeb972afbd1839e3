"""Carry a reference quantizer's integers (llmcompressor's GPTQ/AWQ) into an MNN artifact.

``bench/llmc_reference.py`` runs llmcompressor in its own venv and saves the model's state dict
after the method ran (AWQ folds its scales into norms and linears) and, per linear, the signed
4-bit codes ``q`` in −8..7 as ``u = q + 8`` with ``scale`` and integer ``zero_point`` per group.
compressed-tensors dequantizes ``(q − zp)·scale``; MNN computes ``(u − 8)·scale + zero``, so the
pair is ``[zero, scale] = [−zp·scale, scale]`` and the same codes are exported bit for bit. Both
sides are then MNN artifacts scored the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgellm.host.quantize.apply import quantize_lm_head
from edgellm.host.quantize.grid import QuantizedWeight
from edgellm.host.quantize.plan import QuantPlan


def reference_weights(saved: dict[str, Any], block: int) -> dict[str, QuantizedWeight]:
    """MNN-grid weights of every linear llmcompressor quantized (4-bit asymmetric groups)."""
    out = {}
    for name, q in saved["linears"].items():
        codes = q["codes"].to(torch.uint8)
        scale = q["scale"].to(torch.float32)
        zero = -q["zero_point"].to(torch.float32) * scale
        if codes.shape[1] // scale.shape[1] != block:
            raise ValueError(f"{name}: groups of {codes.shape[1] // scale.shape[1]}, expected {block}")
        out[name] = QuantizedWeight(codes=codes, scale=scale, zero=zero, bits=4, block=block)
    return out


@torch.no_grad()
def load_reference(model: nn.Module, file: Path, plan: QuantPlan) -> dict[str, QuantizedWeight]:
    """Load the reference's state into ``model`` (in place) with its integers; lm_head as ``plan`` says.

    Returns the integer weights for the exporter. The model is left holding their dequantized
    values, so it is the torch twin of the artifact (as ``apply.quantize_model`` leaves ours).
    """
    saved = torch.load(file, weights_only=False)
    model.load_state_dict(saved["state"], strict=True)
    out = reference_weights(saved, plan.block)
    for name, q in out.items():
        lin = model.get_submodule(name)
        assert isinstance(lin, nn.Linear)
        lin.weight.copy_(q.dequantize().to(lin.weight.dtype))
    out["lm_head"] = quantize_lm_head(model, plan)
    return out
