"""A GGUF file as the source: refused early by its header, converted tensor by tensor, precision named."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import gguf
import pytest
import torch
from safetensors.torch import load_file

from edgellm.common.errors import InvalidArgument
from edgellm.common.manifest import Source
from edgellm.host.builder.source import resolve_source
from edgellm.host.convert.gguf_header import precision, source_notice
from edgellm.host.convert.gguf_to_hf import gguf_to_hf
from edgellm.host.convert.shard_writer import ShardWriter
from edgellm.host.quantize.families import check_supported
from tests.tiny_families import build_tiny
from tests.tiny_gguf import write_gguf


def _unsupported_gguf(tmp_path: Path) -> Path:
    """A header-only GGUF of an architecture transformers reads but edgellm does not build (GPT-2)."""
    path = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny Qwen3 checkpoint (q/k norm) and the F32 GGUF written from it."""
    root = tmp_path_factory.mktemp("qwen3")
    hf = build_tiny("qwen3", root / "hf")
    return hf, write_gguf(hf, root / "qwen3.gguf")


def test_a_gguf_converts_to_exactly_the_checkpoint_it_was_written_from(
    qwen3: tuple[Path, Path], tmp_path: Path
) -> None:
    hf, path = qwen3
    out = gguf_to_hf(path, tmp_path / "out")
    want, got = load_file(str(hf / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert sorted(got) == sorted(want)
    assert [k for k in want if not torch.equal(want[k].float(), got[k])] == []
    cfg, ref = (json.loads((d / "config.json").read_text()) for d in (out, hf))
    keys = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings")  # fmt: skip
    assert {k: cfg[k] for k in keys} == {k: ref[k] for k in keys}
    assert cfg["rope_parameters"]["rope_theta"] == ref["rope_parameters"]["rope_theta"]


def test_a_llama_gguf_has_its_q_k_rows_unpermuted_and_quantized_types_read_as_float(tmp_path: Path) -> None:
    hf = build_tiny("llama", tmp_path / "hf")
    path = write_gguf(hf, tmp_path / "llama.gguf", qtype="Q8_0")
    out = gguf_to_hf(path, tmp_path / "out")
    want, got = load_file(str(hf / "model.safetensors")), load_file(str(out / "model.safetensors"))
    for name, w in want.items():
        # Q8_0: one fp16 scale per 32 values, 8-bit codes -> error <= scale/2 = max|w|/254 per block.
        assert torch.allclose(got[name], w.float(), atol=float(w.abs().max()) / 200), name
    assert precision(path).summary() == "Q8_0: 29/38 tensors Q8_0, 9 F32"
    assert source_notice(str(path)) == (
        "source GGUF is Q8_0: 29/38 tensors Q8_0, 9 F32: the artifact cannot be better than this source"
    )


def test_a_gguf_file_is_a_source_with_its_precision_recorded(qwen3: tuple[Path, Path]) -> None:
    _, path = qwen3
    check_supported(str(path))
    source = resolve_source(str(path))
    assert (source.format, source.name, source.precision) == ("gguf", "qwen3", "F32: 46/46 tensors F32")
    assert Path(source.hf_dir).name.startswith(f"qwen3-{source.sha256[:12]}")
    assert source_notice(str(path)) is None  # a float source bounds nothing


def test_an_old_manifest_source_without_precision_still_loads() -> None:
    from edgellm.common.typed_json import read_dataclass

    doc = {"name": "m", "format": "hf", "path": "/m", "sha256": "0" * 64, "hf_dir": "/m"}
    assert read_dataclass(Source, doc).precision is None


def test_an_unsupported_gguf_architecture_is_refused_naming_the_supported_ones(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidArgument, match=r"GGUF architecture 'gpt2' is not supported; .*gemma2, gemma3, llama"
    ):
        check_supported(str(_unsupported_gguf(tmp_path)))


@pytest.mark.parametrize("command", ["convert", "quantize"])
def test_the_cli_refuses_an_unsupported_gguf_before_loading_anything(command: str, tmp_path: Path) -> None:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "edgellm", command, "--model", str(_unsupported_gguf(tmp_path)),
         "-o", str(tmp_path / "out")],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    wall = time.perf_counter() - start
    assert done.returncode == 2, done.stderr
    assert "supported GGUF architectures: gemma2, gemma3, llama, phi3, qwen2, qwen3" in done.stderr
    # Measured 0.44 s on the 2-core dev box, interpreter start included; loose against CI load.
    assert wall < 5.0, f"refusal took {wall:.2f} s"
    assert not (tmp_path / "out").exists()


def test_shards_are_written_as_they_fill_with_an_index(tmp_path: Path) -> None:
    writer = ShardWriter(tmp_path, max_bytes=1000)
    for i in range(5):
        writer.add(f"w{i}", torch.full((100,), float(i)))  # 400 bytes each: two per shard
    paths = writer.finish()
    assert [p.name for p in paths] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 2000
    assert index["weight_map"]["w4"] == "model-00003-of-00003.safetensors"
    assert load_file(str(paths[1]))["w3"].eq(3.0).all()


@pytest.mark.slow
def test_the_bundled_gguf_converts_to_the_same_tensors_as_transformers_whole_model_load(
    tmp_path: Path,
) -> None:
    """The default artifact stays byte-identical: its fp32 checkpoint equals the old whole-model path's."""
    from transformers import AutoModelForCausalLM

    from edgellm.host.convert.default_model import default_gguf_path

    path = default_gguf_path()
    out = gguf_to_hf(path, tmp_path / "out", expected_rope_theta=100000.0)
    got = load_file(str(out / "model.safetensors"))
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    want = {k: v for k, v in ref.state_dict().items() if k != "lm_head.weight"}  # tied: not saved
    assert sorted(got) == sorted(want)
    assert [k for k in want if not torch.equal(want[k], got[k])] == []
