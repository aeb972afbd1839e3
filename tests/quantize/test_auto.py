"""`--plan auto`: search returns a plan as data, meets the budget, and its saved plan re-applies exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgellm.common.artifact_files import read_manifest
from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.builder.pipeline import build_artifact, quantize
from edgellm.host.quantize.auto import search_plan
from edgellm.host.quantize.plan import Calibration, load_plan, plan_from_json, preset, with_calibration

# Small calibration so the tests stay fast; the default is 128 x 256 tokens.
SMALL = Calibration(samples=4, seq_len=64)


def test_auto_meets_budget_and_records_the_plan_it_applied(tiny_model: LoadedModel, tmp_path: Path) -> None:
    base = with_calibration(preset("int4", method="gptq", block=32), SMALL)
    result = search_plan(tiny_model, base, 0.02, tmp_path / "auto")
    auto = result["auto"]
    assert auto["candidates"] and all(c["size_bytes"] > 0 for c in auto["candidates"])
    sizes = {c["k"]: c["size_bytes"] for c in auto["candidates"]}
    assert sizes == dict(sorted(sizes.items())) and list(sizes.values()) == sorted(sizes.values())
    res = result["evaluation"]["results"]
    assert res["mnn"]["ppl"] <= res["fp"]["ppl"] * 1.02
    manifest, _ = read_manifest(tmp_path / "auto")
    plan = plan_from_json(manifest.quantization.plan)
    assert plan.name == "auto" and auto["base_reused"] is False
    # One rule per INT8 linear, with the block those integers were exported with (not per channel).
    assert len(plan.rules) == 3 * auto["units_int8"] or auto["units_int8"] == 0
    assert all(r.bits == 8 and r.block == 32 and r.method == "rtn" for r in plan.rules)

    # A second search on the loaded model reuses the base quantization; a size budget is never exceeded.
    budget = auto["candidates"][0]["size_bytes"] + 1
    again = search_plan(tiny_model, base, 0.5, tmp_path / "sized", size_budget=budget)
    assert again["auto"]["base_reused"] is True
    assert [c["size_bytes"] <= budget for c in again["auto"]["candidates"]] == [True]


def test_a_saved_auto_plan_reapplied_gives_byte_identical_weights(
    tiny_model: LoadedModel, tmp_path: Path
) -> None:
    """RTN: `--plan auto --save-plan P -o A`, then `--plan P -o B`: the same llm.mnn.weight, byte for byte."""
    base = with_calibration(preset("int4", method="rtn", block=32), SMALL)
    # A size budget with room for some INT8 units but not all (the tiny model's 8 units cost
    # 49,152 bytes at INT8 over INT4), so the plan mixes INT8 rules with the INT4 base.
    base_bytes = sum(q.n_bytes() for q in quantize(tiny_model, base).weights.values())
    result = search_plan(tiny_model, base, 0.5, tmp_path / "a", size_budget=base_bytes + 20_000)
    saved = tmp_path / "plan.json"
    plan_from_json(result["plan"]).save(saved)
    plan = load_plan(saved)
    assert 0 < len(plan.rules) < 14  # 2 layers x (3 + 1 + 2 + 1) linears
    build_artifact(tiny_model, plan, tmp_path / "b")
    a = (tmp_path / "a" / "llm.mnn.weight").read_bytes()
    b = (tmp_path / "b" / "llm.mnn.weight").read_bytes()
    assert a == b
    assert (
        read_manifest(tmp_path / "b")[0].quantization.plan
        == read_manifest(tmp_path / "a")[0].quantization.plan
    )


def test_auto_rejects_a_bad_budget(tiny_model: LoadedModel, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="budget"):
        search_plan(tiny_model, preset("int4"), 3.0, tmp_path / "x")
