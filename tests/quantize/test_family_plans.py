"""Mixed and auto plans on every family: what each linear gets, fused layers, and precise refusals.

Torch only (RTN on each family's tiny model, well under a second each); tests/families/test_plans.py
takes the plans on through export, the conversion gate and the daemon.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from edgellm.host.quantize.adapter import adapter_for
from edgellm.host.quantize.apply import quantize_model
from edgellm.host.quantize.auto import plan_for
from edgellm.host.quantize.grid import rtn_quantize
from edgellm.host.quantize.plan import PlanError, plan_from_json, preset
from tests.tiny_families import FAMILIES as TINY
from tests.tiny_families import LAYERS, sensitive_plan, tiny_config, tiny_model

KINDS = sorted(TINY)
SENSITIVE = sensitive_plan("rtn")


def _attention_in(name: str) -> bool:
    return any(name.endswith(f"self_attn.{p}") for p in ("q_proj", "k_proj", "v_proj", "qkv_proj"))


@pytest.mark.parametrize("family", KINDS)
def test_the_sensitive_layers_plan_quantizes_each_familys_linears_as_it_says(family: str) -> None:
    model = tiny_model(family)
    weights, _ = quantize_model(model, plan_from_json(SENSITIVE), None)
    first_or_last = (".layers.0.", f".layers.{LAYERS - 1}.")
    want = {
        n: 8 if n == "lm_head" or _attention_in(n) or any(s in n for s in first_or_last) else 4
        for n in weights
    }
    assert {n: q.bits for n, q in weights.items()} == want
    assert sum(b == 4 for b in want.values()) >= 4  # the middle blocks' o, gate/up and down stay INT4


@pytest.mark.parametrize("family", KINDS)
def test_the_mixed_preset_gives_attention_q_k_v_int8_on_every_family(family: str) -> None:
    model = tiny_model(family)
    specs = adapter_for(model).resolve(preset("mixed", block=32), model)
    assert {n for n, s in specs.items() if s.bits == 8} == {n for n in specs if _attention_in(n)}
    assert len([n for n in specs if _attention_in(n)]) == LAYERS * (1 if family == "phi3" else 3)


def test_phi3_takes_rules_for_q_k_v_or_gate_up_as_rules_for_its_fused_tensor() -> None:
    """Before: the mixed preset's q/k/v rules matched no Phi-3 linear and the build was INT4 throughout."""
    model = tiny_model("phi3")
    doc = {"rules": [{"pattern": "*.mlp.gate_proj", "bits": 8}, {"pattern": "*.mlp.up_proj", "bits": 8}]}
    specs = adapter_for(model).resolve(preset("mixed", block=32), model)
    assert specs["model.layers.1.self_attn.qkv_proj"].bits == 8
    specs = adapter_for(model).resolve(plan_from_json(doc), model)
    assert (
        specs["model.layers.1.mlp.gate_up_proj"].bits == 8 and specs["model.layers.1.mlp.down_proj"].bits == 4
    )


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            [{"pattern": "*.self_attn.q_proj", "bits": 8}],
            r"model\.layers\.0\.self_attn\.qkv_proj is one fused tensor holding self_attn\.q_proj, "
            r"self_attn\.k_proj, self_attn\.v_proj.*self_attn\.q_proj 8-bit block 64 rtn; "
            r"self_attn\.k_proj 4-bit.*rule for the fused linear \('\*\.self_attn\.qkv_proj'\)",
        ),
        (
            [
                {"pattern": "*.self_attn.qkv_proj", "bits": 8},
                {"pattern": "model.layers.2.*.v_proj", "block": 32},
            ],
            r"model\.layers\.2\.self_attn\.qkv_proj is one fused tensor.*v_proj 8-bit block 32",
        ),
        (
            [{"pattern": "model.layers.1.mlp.gate_proj", "method": "gptq"}],
            r"layers\.1\.mlp\.gate_up_proj is one fused tensor holding mlp\.gate_proj, mlp\.up_proj.*"
            r"gate_proj 4-bit block 64 gptq; mlp\.up_proj 4-bit block 64 rtn",
        ),
    ],
)
def test_a_plan_cannot_split_phi3s_fused_qkv_or_gate_up(rules: list[dict[str, object]], message: str) -> None:
    model = tiny_model("phi3")
    with pytest.raises(PlanError, match=message):
        adapter_for(model).resolve(plan_from_json({"rules": rules}), model)


@pytest.mark.parametrize(
    ("family", "pattern", "hint"),
    [
        ("qwen3", "*.self_attn.q_norm", "norms, embeddings and their scaling stay in float"),
        ("gemma2", "model.embed_tokens", "lm_head \\(and the embedding tied to it\\) takes lm_head_bits"),
        ("llama", "lm_head", "takes lm_head_bits/lm_head_block"),
        ("phi3", "*.mlp.gate_up", r"mlp\.gate_up_proj \(fused gate_proj\+up_proj\)"),
        ("mistral", "model.layers.4.*", r"model\.layers\.0-3: self_attn\.q_proj, self_attn\.k_proj"),
    ],
)
def test_a_rule_that_matches_no_linear_of_the_family_is_refused_saying_what_it_can_name(
    family: str, pattern: str, hint: str
) -> None:
    model = tiny_model(family)
    plan = plan_from_json({"rules": [{"pattern": pattern, "bits": 8}]})
    with pytest.raises(PlanError, match=f"rule '{re.escape(pattern)}' matches no linear.*{hint}"):
        quantize_model(model, plan, None)


@pytest.mark.parametrize("family", KINDS)
def test_an_auto_plan_re_applies_to_each_family_with_the_same_integers(family: str) -> None:
    """What `--plan auto` records (plan_for: one rule per INT8 linear, fused ones by their own name)
    rebuilds exactly the integers the search exported, on every family."""
    model = tiny_model(family)
    base = preset("int4", method="rtn", block=32)
    w4, _ = quantize_model(tiny_model(family), base, None)
    units = adapter_for(model).sequential  # the search's units: a layer's q/k/v (or qkv), o, gate/up, down
    chosen = [f"model.layers.{i}.{s}" for i in (0, 2) for s in units[0] + units[3]]
    picked = w4 | {n: rtn_quantize(model.get_submodule(n).weight, 8, 32) for n in chosen}
    plan = plan_for(base, picked)
    assert sorted(r.pattern for r in plan.rules) == sorted(chosen)
    again, _ = quantize_model(model, plan, None)
    for name, q in picked.items():
        assert (again[name].bits, again[name].block) == (q.bits, q.block), name
        assert torch.equal(again[name].codes, q.codes), name


SPLIT_QKV = json.dumps({"rules": [{"pattern": "*.self_attn.q_proj", "bits": 8}]})


def test_the_cli_refuses_a_plan_splitting_phi3s_qkv_from_config_json_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No weight file at all: the plan is checked against a meta-device model before any load."""
    from edgellm.cli import main

    tiny_config("phi3").save_pretrained(str(tmp_path / "phi3"))
    code = main(
        ["quantize", "--model", str(tmp_path / "phi3"), "--plan", SPLIT_QKV, "-o", str(tmp_path / "out")]
    )
    assert code == 2
    assert "self_attn.qkv_proj is one fused tensor" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_host_service_refuses_a_plan_the_family_cannot_take_as_invalid_argument(tmp_path: Path) -> None:
    from edgellm.common.errors import InvalidArgument
    from edgellm.host.job_rpcs import check_quantize
    from edgellm.v1 import host_pb2

    tiny_config("qwen3").save_pretrained(str(tmp_path / "qwen3"))
    plan = json.dumps({"rules": [{"pattern": "*.self_attn.k_norm", "bits": 8}]})
    request = host_pb2.QuantizeRequest(
        model=str(tmp_path / "qwen3"), plan=plan, output_dir=str(tmp_path / "o")
    )
    with pytest.raises(InvalidArgument, match=r"bad plan: rule '\*\.self_attn\.k_norm' matches no linear"):
        check_quantize(request)
