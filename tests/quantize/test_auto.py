"""`--plan auto`: search returns a plan as data, lists its candidates, and meets the budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgellm.host.quantize.auto import search_plan
from edgellm.host.quantize.pipeline import Session
from edgellm.host.quantize.plan import Calibration, plan_from_json, preset, with_calibration


def test_auto_meets_budget_and_saves_a_reusable_plan(tiny_session: Session, tmp_path: Path) -> None:
    # Small calibration so the test stays fast; the default is 128 x 256 tokens.
    base = with_calibration(preset("int4", method="gptq", block=32), Calibration(samples=4, seq_len=64))
    tiny_session._calib[base.calibration] = tiny_session.calibration(base)
    tiny_session._calib[Calibration()] = tiny_session._calib[base.calibration]
    result = search_plan(tiny_session, 0.02, tmp_path / "auto", method="rtn", block=32)
    auto = result["auto"]
    assert auto["candidates"] and all(c["size_bytes"] > 0 for c in auto["candidates"])
    sizes = {c["k"]: c["size_bytes"] for c in auto["candidates"]}
    assert sizes == dict(sorted(sizes.items())) and list(sizes.values()) == sorted(sizes.values())
    res = result["evaluation"]["results"]
    assert res["mnn"]["ppl"] <= res["fp"]["ppl"] * 1.02
    manifest = json.loads((tmp_path / "auto" / "manifest.json").read_text())
    plan = plan_from_json(manifest["quantization"]["plan"])
    assert plan.name == "auto" and len(plan.rules) >= 0
    assert auto["base_reused"] is False

    # A second search on the session reuses the base quantization; a size budget is never exceeded.
    budget = auto["candidates"][0]["size_bytes"] + 1
    again = search_plan(tiny_session, 0.5, tmp_path / "sized", method="rtn", block=32, size_budget=budget)
    assert again["auto"]["base_reused"] is True
    assert [c["size_bytes"] <= budget for c in again["auto"]["candidates"]] == [True]


def test_auto_rejects_a_bad_budget(tiny_session: Session, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="budget"):
        search_plan(tiny_session, 3.0, tmp_path / "x")
