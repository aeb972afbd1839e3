"""Converter: input validation, manifest integrity, and loud verification failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgellm.common.paths import cache_dir
from edgellm.host.convert.default_model import default_source
from edgellm.host.convert.gguf_to_hf import EXPECTED_ROPE_THETA
from edgellm.host.convert.llmexport_adapter import (
    ExportFailed,
    ExportSettings,
    check_exported_rope_theta,
    validate_settings,
)
from edgellm.host.convert.manifest import (
    Manifest,
    ManifestError,
    list_files,
    load_manifest,
    verify_files,
    write_manifest,
)
from edgellm.host.convert.pipeline import convert
from edgellm.host.convert.verify import ConversionCheckFailed, verify

SMOLLM2_WIDTHS = [576, 576, 1536]


@pytest.mark.parametrize("block", [128, 256, 100])
def test_block_that_does_not_divide_width_is_refused(block: int) -> None:
    with pytest.raises(ValueError, match="does not divide"):
        validate_settings(ExportSettings(block=block), SMOLLM2_WIDTHS)


@pytest.mark.parametrize("block", [0, 32, 64])
def test_valid_blocks_pass(block: int) -> None:
    validate_settings(ExportSettings(block=block, lm_block=block), SMOLLM2_WIDTHS)


def test_bits_and_eval_split_calibration_are_refused() -> None:
    with pytest.raises(ValueError, match="bits"):
        validate_settings(ExportSettings(bits=3), SMOLLM2_WIDTHS)
    with pytest.raises(ValueError, match="evaluation split"):
        validate_settings(ExportSettings(calib_data=Path("data/wikitext2-test.txt")), SMOLLM2_WIDTHS)


def test_convert_default_block_128_fails_fast_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "art"
    with pytest.raises(ValueError, match="576"):
        convert("default", out, bits=4, block=128)
    assert list(tmp_path.iterdir()) == []


def test_cli_block_128_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edgellm.cli import main

    assert main(["convert", "--model", "default", "-o", str(tmp_path / "a"), "--block", "128"]) == 2
    assert "does not divide" in capsys.readouterr().err


def test_default_artifact_manifest_matches_files(default_artifact: Path) -> None:
    manifest = load_manifest(default_artifact)
    verify_files(default_artifact, manifest)
    names = {f.path for f in manifest.files}
    required = {"config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok", "tokens.bin"}
    assert required <= names
    assert 2 in manifest.tokenizer["stop_token_ids"]  # <|im_end|>
    assert manifest.source["sha256"] == default_source().sha256
    assert manifest.model["rope_theta"] == EXPECTED_ROPE_THETA
    assert manifest.model["context_length"] == 8192
    assert manifest.quantization["method"] == "rtn"
    checks = manifest.checks
    assert checks["ppl_ratio"] <= 1.05
    assert checks["mnn_ppl"] == max(checks["mnn_ppl_prefill"], checks["mnn_ppl_decode"])
    llm_config = json.loads((default_artifact / "llm_config.json").read_text())
    assert llm_config["rope_theta"] == EXPECTED_ROPE_THETA  # exporter used the right RoPE base


def test_tampered_file_fails_manifest_check(tmp_path: Path) -> None:
    art = tmp_path / "art"
    art.mkdir()
    (art / "a.bin").write_bytes(b"\x00" * 64)
    (art / "sub").mkdir()
    (art / "sub" / "b.txt").write_text("hello")
    files = list_files(art)
    manifest = Manifest("t", files, {}, {}, {}, {}, {}, created="now")
    write_manifest(art, manifest)
    verify_files(art, load_manifest(art))
    (art / "a.bin").write_bytes(b"\x00" * 63 + b"\x01")
    with pytest.raises(ManifestError, match=r"a\.bin"):
        verify_files(art, load_manifest(art))
    (art / "extra").write_text("x")
    with pytest.raises(ManifestError, match="unexpected"):
        verify_files(art, load_manifest(art))


def test_wrong_rope_theta_in_export_is_refused(tmp_path: Path) -> None:
    (tmp_path / "llm_config.json").write_text(json.dumps({"rope_theta": 10000.0}))
    with pytest.raises(ExportFailed, match="rope theta"):
        check_exported_rope_theta(tmp_path, EXPECTED_ROPE_THETA)


def _hf_dir() -> Path:
    source = default_source()
    return cache_dir() / "hf" / f"{source.name}-{source.sha256[:12]}"


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
    with pytest.raises(ConversionCheckFailed, match="torch"):
        verify(broken, _hf_dir(), n_tokens=128)


def test_existing_output_is_not_replaced_without_force(default_artifact: Path) -> None:
    with pytest.raises(FileExistsError, match="force"):
        convert("default", default_artifact)
    verify_files(default_artifact, load_manifest(default_artifact))


def test_failed_export_leaves_no_partial_artifact(tmp_path: Path) -> None:
    """A checkpoint without weights: llmexport fails, and nothing is left behind."""
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
    with pytest.raises(ExportFailed, match="llmexport exited"):
        convert(str(hf), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_ensure_default_artifact_reuses_a_valid_one(default_artifact: Path) -> None:
    from edgellm.host.convert.pipeline import ensure_default_artifact

    before = (default_artifact / "manifest.json").stat().st_mtime_ns
    assert ensure_default_artifact(default_artifact) == default_artifact
    assert (default_artifact / "manifest.json").stat().st_mtime_ns == before
