"""Converter: the convert preset of the one builder, input validation, manifest integrity, loud failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgellm.common.artifact_files import read_manifest, verify_files
from edgellm.common.errors import FailedPrecondition
from edgellm.host.builder.host_source import host_hf_dir
from edgellm.host.builder.loaded import load_model
from edgellm.host.builder.source import checkpoint, resolve_source
from edgellm.host.convert.default_model import default_source
from edgellm.host.convert.gguf_to_hf import EXPECTED_ROPE_THETA
from edgellm.host.convert.llmexport_adapter import ExportFailed, check_exported_rope_theta
from edgellm.host.convert.pipeline import convert, convert_plan, is_current
from edgellm.host.convert.verify import ConversionCheckFailed, verify
from edgellm.host.quantize.plan import PlanError, check_calibration, plan_from_json

SMOLLM2_WIDTHS = [576, 576, 1536]


@pytest.mark.parametrize(("block", "why"), [(128, "does not divide"), (256, "does not divide"), (100, "16")])
def test_block_that_does_not_divide_width_is_refused(block: int, why: str) -> None:
    with pytest.raises(PlanError, match=why):
        convert_plan(block=block).check_widths(SMOLLM2_WIDTHS)


@pytest.mark.parametrize("block", [0, 32, 64, 192])
def test_valid_blocks_pass(block: int) -> None:
    convert_plan(block=block).check_widths(SMOLLM2_WIDTHS)


def test_the_evaluation_split_is_refused_for_calibration_by_name_and_by_content(tmp_path: Path) -> None:
    from edgellm.common.paths import data_dir
    from edgellm.host.quantize.plan import Calibration

    with pytest.raises(PlanError, match="test split"):
        check_calibration(Calibration(file="/elsewhere/wikitext2-test.txt"))
    copy = tmp_path / "renamed.txt"
    copy.write_bytes((data_dir() / "wikitext2-test.txt").read_bytes())
    with pytest.raises(PlanError, match="test split"):
        check_calibration(Calibration(file=str(copy)))
    contest = tmp_path / "contest.txt"  # a name containing "test" is fine: the guard is not a substring test
    contest.write_text("some other text\n" * 100)
    check_calibration(Calibration(file=str(contest)))


def test_convert_default_block_128_fails_fast_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "art"
    with pytest.raises(PlanError, match="576"):
        convert("default", out, bits=4, block=128)
    assert list(tmp_path.iterdir()) == []


def test_cli_block_128_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edgellm.cli import main

    assert main(["convert", "--model", "default", "-o", str(tmp_path / "a"), "--block", "128"]) == 2
    assert "does not divide" in capsys.readouterr().err


def test_default_artifact_is_the_convert_preset_with_its_gate_and_reference(default_artifact: Path) -> None:
    manifest, _ = read_manifest(default_artifact)
    verify_files(default_artifact, manifest)
    names = {f.path for f in manifest.files}
    required = {"config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok", "tokens.bin"}
    assert required | {"tokenizer.json"} <= names
    assert manifest.tokenizer.hf_tokenizer == "tokenizer.json"  # constrained output (docs/constrained.md)
    assert 2 in manifest.tokenizer.stop_token_ids  # <|im_end|>
    assert manifest.source.sha256 == default_source().sha256 and manifest.source.format == "gguf"
    assert (host_hf_dir(default_artifact, manifest) / "config.json").is_file()  # eval's fp reference
    assert manifest.model.rope_theta == EXPECTED_ROPE_THETA
    assert manifest.model.context_length == 8192 and manifest.model.head_dim == 64
    assert manifest.build.builder == "convert"
    q = manifest.quantization
    assert (q.method, q.bits, q.block, q.lm_head_bits, q.lm_head_block, q.embedding_bits) == (
        "rtn",
        4,
        32,
        8,
        32,
        8,
    )
    assert plan_from_json(q.plan) == convert_plan() and q.round_trip_exact
    assert manifest.runtime.attention_mode == 8 and manifest.runtime.dynamic_option == 2
    config = json.loads((default_artifact / "config.json").read_text())
    assert {k: config[k] for k in ("memory", "precision", "dynamic_option", "attention_mode")} == vars(
        manifest.runtime
    )
    checks = manifest.checks
    assert checks is not None and checks.ppl_ratio <= 1.05
    assert checks.mnn_ppl == max(checks.mnn_ppl_prefill, checks.mnn_ppl_decode)
    llm_config = json.loads((default_artifact / "llm_config.json").read_text())
    assert llm_config["rope_theta"] == EXPECTED_ROPE_THETA  # exporter used the right RoPE base


def test_wrong_rope_theta_in_export_is_refused(tmp_path: Path) -> None:
    (tmp_path / "llm_config.json").write_text(json.dumps({"rope_theta": 10000.0}))
    with pytest.raises(ExportFailed, match="rope theta"):
        check_exported_rope_theta(tmp_path, EXPECTED_ROPE_THETA)


def test_broken_artifact_fails_verification(default_artifact: Path, tmp_path: Path) -> None:
    """Point the tied embedding at the wrong bytes: a real, subtly broken artifact."""
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in default_artifact.iterdir():
        if path.name == "llm_config.json":
            continue
        (broken / path.name).symlink_to(path.resolve())
    llm_config = json.loads((default_artifact / "llm_config.json").read_text())
    offset = llm_config["tie_embeddings"]
    offset[0] += 4096  # embedding rows now read from the wrong place in llm.mnn.weight
    (broken / "llm_config.json").write_text(json.dumps(llm_config))
    model, tokenizer = load_model(checkpoint(resolve_source("default")))
    with pytest.raises(ConversionCheckFailed, match="torch"):
        verify(broken, model, tokenizer, n_tokens=128)


def test_existing_output_is_not_replaced_without_force(default_artifact: Path) -> None:
    with pytest.raises(FileExistsError, match="force"):
        convert("default", default_artifact)
    verify_files(default_artifact, read_manifest(default_artifact)[0])


def test_a_checkpoint_without_weights_fails_before_export_and_leaves_nothing(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "vocab_size": 100,
        "max_position_embeddings": 128,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    }
    (hf / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    with pytest.raises(FileNotFoundError, match="no weights"):
        convert(str(hf), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_the_default_artifact_is_current_and_a_stale_one_says_why(
    default_artifact: Path, tmp_path: Path
) -> None:
    from edgellm.host.convert.pipeline import ensure_default_artifact

    before = (default_artifact / "manifest.json").stat().st_mtime_ns
    assert ensure_default_artifact(default_artifact) == default_artifact
    assert (default_artifact / "manifest.json").stat().st_mtime_ns == before
    with pytest.raises(FailedPrecondition, match="another plan"):
        is_current(default_artifact, "default", convert_plan(block=64))
