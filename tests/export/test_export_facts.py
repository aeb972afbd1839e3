"""What torch computes, as export_facts reads it, and the field-by-field comparison (no export)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from edgellm.host.convert.export_facts import (
    LLM_CONFIG_KEY,
    ExportFacts,
    ExportMismatch,
    RopeTable,
    check_export,
    facts_of_model,
    mismatches,
    sliding_layers_of,
)
from tests.tiny_families import FAMILIES, tiny_config


def _model(family: str, **overrides: Any) -> Any:
    import transformers

    torch.manual_seed(0)
    return getattr(transformers, FAMILIES[family][1])(tiny_config(family, **overrides))


def _write(tmp_path: Path, facts: ExportFacts) -> Path:
    import json

    (tmp_path / "llm_config.json").write_text(json.dumps({LLM_CONFIG_KEY: facts.to_json()}))
    return tmp_path


def test_llama3_scaling_gives_a_table_that_default_rope_does_not() -> None:
    scaled = facts_of_model(_model("llama3"))
    default = facts_of_model(
        _model("llama3", rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    )
    assert scaled.layer_rope[0] is not None and default.layer_rope[0] is not None
    assert scaled.layer_rope[0].inv_freq[0] == default.layer_rope[0].inv_freq[0]  # high frequencies kept
    assert not scaled.layer_rope[0].close_to(default.layer_rope[0])  # low ones divided by the factor
    assert set(mismatches(default, scaled)) == {"layer_rope[0]"}


def test_smollm3_nope_layers_have_no_table_and_a_rotary_there_is_caught() -> None:
    facts = facts_of_model(_model("smollm3"))
    assert [t is None for t in facts.layer_rope] == [False, False, False, True]
    everywhere = ExportFacts(layer_rope=(facts.layer_rope[0],) * 4)
    assert set(mismatches(everywhere, facts)) == {"layer_rope[3]"}


def test_gemma3_gives_its_full_layers_their_own_table() -> None:
    facts = facts_of_model(_model("gemma3_text"))
    sliding, full = facts.layer_rope[0], facts.layer_rope[3]
    assert sliding is not None and full is not None and not sliding.close_to(full)
    assert facts.sliding_window == 32 and facts.sliding_layers == (0, 1, 2)
    assert facts.embed_scale == pytest.approx(8.0)  # sqrt(hidden 64)


def test_gemma2_facts_name_its_window_and_both_softcaps() -> None:
    facts = facts_of_model(_model("gemma2"))
    assert facts.sliding_window == 32 and facts.sliding_layers == (0, 2)
    assert facts.attn_softcap == 50.0 and facts.final_softcap == 30.0


def test_sliding_layers_follow_layer_types_then_use_sliding_window() -> None:
    assert sliding_layers_of({"sliding_window": 4096, "num_hidden_layers": 2}) == (4096, (0, 1))
    assert sliding_layers_of(
        {"sliding_window": 4096, "use_sliding_window": False, "num_hidden_layers": 2}
    ) == (0, ())
    kinds = ["full_attention", "sliding_attention"]
    assert sliding_layers_of({"sliding_window": 64, "layer_types": kinds}) == (64, (1,))
    assert sliding_layers_of({"sliding_window": None, "layer_types": kinds}) == (0, ())


def test_facts_survive_the_json_round_trip() -> None:
    facts = facts_of_model(_model("gemma3_text"))
    assert ExportFacts.from_json(facts.to_json()) == facts


def test_check_fails_naming_the_field_and_accepts_the_known_softcap_limitation(tmp_path: Path) -> None:
    want = ExportFacts(
        layer_rope=(RopeTable((1.0, 0.1)),) * 2, sliding_window=32, sliding_layers=(0,), attn_softcap=50.0
    )
    exported = ExportFacts(layer_rope=want.layer_rope, sliding_window=32, sliding_layers=(0,))
    assert set(check_export(_write(tmp_path, exported), want)) == {"attn_softcap"}
    no_window = ExportFacts(layer_rope=want.layer_rope)
    with pytest.raises(ExportMismatch, match="sliding_window: exported 0, model 32"):
        check_export(_write(tmp_path, no_window), want)


def test_an_artifact_without_recorded_facts_is_refused(tmp_path: Path) -> None:
    (tmp_path / "llm_config.json").write_text("{}")
    with pytest.raises(ExportMismatch, match=LLM_CONFIG_KEY):
        check_export(tmp_path, ExportFacts(layer_rope=()))


def test_a_model_whose_every_layer_slides_is_served_only_up_to_its_window(tmp_path: Path) -> None:
    import json

    from edgellm.host.builder.source import model_shape

    cfg = {
        "model_type": "mistral",
        "vocab_size": 8,
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_hidden_layers": 2,
    }
    cfg |= {"num_attention_heads": 2, "max_position_embeddings": 32768, "sliding_window": 4096}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert model_shape(tmp_path).context_length == 4096
    (tmp_path / "config.json").write_text(
        json.dumps(cfg | {"layer_types": ["sliding_attention", "full_attention"]})
    )
    assert model_shape(tmp_path).context_length == 32768  # mixed layers: MNN applies the window


def test_a_longrope_model_is_served_only_up_to_its_original_context(tmp_path: Path) -> None:
    import json

    from edgellm.host.builder.source import model_shape

    cfg = {
        "model_type": "phi3",
        "vocab_size": 8,
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
    }
    longrope = {"long_factor": [1.0, 2.0], "short_factor": [1.0, 1.0]}
    # Phi-3.5-mini's own config.json (transformers 4 layout) and a transformers-5 save of it.
    (tmp_path / "config.json").write_text(
        json.dumps(cfg | {"rope_scaling": {"type": "longrope", **longrope}})
    )
    assert model_shape(tmp_path).context_length == 4096
    v5 = {"rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, **longrope}}
    (tmp_path / "config.json").write_text(json.dumps(cfg | v5))
    assert model_shape(tmp_path).context_length == 4096
    default = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    (tmp_path / "config.json").write_text(json.dumps(cfg | default))
    assert model_shape(tmp_path).context_length == 131072
