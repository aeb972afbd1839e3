"""A real llmexport run on tiny checkpoints: the graph's RoPE, window and caps are torch's (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgellm.host.convert.export_facts import (
    ExportMismatch,
    check_export,
    facts_of_model,
    mismatches,
    read_exported,
)
from tests.tiny_families import build_tiny

# One family in the default run (each export is 15-70 s on the 2-core box); the rest are `slow`.
FAMILIES = [
    "llama3",
    pytest.param("smollm3", marks=pytest.mark.slow),
    pytest.param("gemma2", marks=pytest.mark.slow),
    pytest.param("gemma3_text", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_exported_graph_computes_what_torch_does(family: str, tmp_path: Path) -> None:
    from edgellm.host.builder.loaded import LoadedModel
    from edgellm.host.builder.pipeline import Measure, build_artifact
    from edgellm.host.convert.pipeline import convert_plan

    loaded = LoadedModel.open(str(build_tiny(family, tmp_path / "hf")))
    # The build itself runs check_export in _finish: a mismatch raises before this returns.
    measure = Measure(evaluate=False, verify=False)
    art = build_artifact(
        loaded, convert_plan(8, 32, 8), tmp_path / "art", builder="convert", measure=measure
    ).path
    exported = read_exported(art)
    assert exported is not None
    assert set(mismatches(exported, facts_of_model(loaded.model))) <= {"attn_softcap"}
    if family == "llama3":
        # llmexport's own table (default theta 500000) is what the runner replaced: a model with
        # that RoPE must not pass against this graph.
        import transformers

        default = transformers.AutoModelForCausalLM.from_pretrained(
            str(tmp_path / "hf"), rope_parameters={"rope_type": "default", "rope_theta": 500000.0}
        )
        with pytest.raises(ExportMismatch, match=r"layer_rope\[0\]"):
            check_export(art, facts_of_model(default))
