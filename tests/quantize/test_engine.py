"""Each method and preset applied to a tiny Llama: every linear on the MNN grid, fp function close."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from edgellm.host.quantize.apply import quantize_model
from edgellm.host.quantize.plan import PlanError, preset


@pytest.fixture(scope="module")
def tiny_model(tiny_hf: Path) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_hf), dtype=torch.float32)
    model.eval()  # type: ignore[no-untyped-call]
    return model


@pytest.mark.parametrize(
    ("method", "plan"), [("rtn", "int4"), ("gptq", "int4"), ("awq", "mixed"), ("rtn", "int8")]
)
def test_methods_put_every_linear_on_its_grid(tiny_model: Any, method: str, plan: str) -> None:
    model = copy.deepcopy(tiny_model)
    calib = torch.randint(0, 49152, (4, 32), generator=torch.Generator().manual_seed(0))
    qplan = preset(plan, method=method, block=32)
    qweights, scales = quantize_model(model, qplan, calib if method != "rtn" else None)
    assert len(qweights) == 2 * 7 + 1  # 7 linears per layer + lm_head
    for name, q in qweights.items():
        module = model.get_submodule(name)
        assert torch.equal(module.weight.detach(), q.dequantize()), name
        spec = qplan.spec_for(name) if name != "lm_head" else None
        if spec is not None:
            assert q.bits == spec.bits
    if method == "awq":
        assert scales and all(torch.isfinite(s.scales).all() for s in scales)
    ids = torch.randint(0, 49152, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()


def test_block_that_does_not_divide_is_refused(tiny_model: Any) -> None:
    with pytest.raises(PlanError, match="does not divide input width 64"):
        quantize_model(copy.deepcopy(tiny_model), preset("int4", block=128), None)


def test_gptq_without_calibration_is_refused(tiny_model: Any) -> None:
    with pytest.raises(ValueError, match="calibration"):
        quantize_model(copy.deepcopy(tiny_model), preset("int4", method="gptq", block=32), None)


@pytest.mark.parametrize(("grid", "clipped"), [("minmax", False), ("mse", True)])
def test_awq_rounds_on_the_grid_its_search_scored(
    tiny_model: Any, monkeypatch: pytest.MonkeyPatch, grid: str, clipped: bool
) -> None:
    # AWQ scores every candidate scale on min..max block ranges; by default the final rounding
    # uses the same ranges (plan.awq_grid "minmax"), the MSE clipping search only when asked.
    from dataclasses import replace

    from edgellm.host.quantize import apply
    from edgellm.host.quantize.grid import rtn_quantize as real

    seen: list[bool] = []

    def spy(w: torch.Tensor, bits: int, block: int, clip_search: bool = False) -> Any:
        seen.append(clip_search)
        return real(w, bits, block, clip_search=clip_search)

    monkeypatch.setattr(apply, "rtn_quantize", spy)
    calib = torch.randint(0, 49152, (4, 32), generator=torch.Generator().manual_seed(0))
    plan = replace(preset("int4", method="awq", block=32), awq_grid=grid)
    qweights, _ = quantize_model(copy.deepcopy(tiny_model), plan, calib)
    # Every linear went through rtn_quantize once, and lm_head once per LM_HEAD_ROWS-row chunk
    # (apply.quantize_lm_head: the rows quantize independently, so chunks bound its temporaries).
    linears = len(qweights) - 1
    lm_chunks = -(-tiny_model.get_output_embeddings().weight.shape[0] // apply.LM_HEAD_ROWS)
    assert len(seen) == linears + lm_chunks
    assert seen[:linears] == [clipped] * linears and not any(seen[linears:])  # lm_head: plain RTN
