"""Faithful export: the MNN artifact holds exactly the torch model's integers and computes the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from edgellm.common.artifact_files import read_manifest
from edgellm.host.builder.host_source import HOST_SOURCE
from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.quantize import mnn_weights
from edgellm.host.quantize.export import carry_weights
from edgellm.host.quantize.grid import rtn_quantize


def test_artifact_has_manifest_plan_and_exact_round_trip(tiny_artifact: tuple[Path, dict[str, Any]]) -> None:
    path, result = tiny_artifact
    manifest, _ = read_manifest(path)
    q = manifest.quantization
    assert q.plan["name"] == "mixed" and q.method == "gptq"
    assert q.round_trip_exact is True
    assert q.calibration is not None and q.calibration.file.endswith("wikitext2-valid.txt")
    assert manifest.source.format == "hf" and manifest.source.hf_dir == str(Path(manifest.source.path))
    assert manifest.model.head_dim == 16 and manifest.model.architecture == "llama"
    names = {f.path for f in manifest.files}
    assert {"llm.mnn", "llm.mnn.weight", "config.json", "tokens.bin"} <= names
    hidden = {p.name for p in path.iterdir() if p.name.startswith(".")}
    assert "llm.mnn.json" not in names and hidden == {HOST_SOURCE}  # no temp file left behind
    res = result["evaluation"]["results"]
    assert abs(res["mnn"]["ppl"] / res["torch"]["ppl"] - 1) < 0.01


def test_weights_read_back_match_and_mixed_bits(tiny_artifact: tuple[Path, dict[str, Any]]) -> None:
    path, _ = tiny_artifact
    slots = mnn_weights.linears(mnn_weights.graph_json(path))
    assert slots["/layers.0/self_attn/q_proj/Linear"].bits == 8
    # INT8 in blocks too: MNN's low-memory runtime quantizes a linear's input per weight block.
    assert slots["/layers.0/self_attn/q_proj/Linear"].n_blocks == 2  # 64 / block 32
    assert slots["/layers.0/mlp/down_proj/Linear"].bits == 4
    assert slots["/layers.1/mlp/gate_proj/Linear"].n_blocks == 2  # 64 / block 32


def test_mnn_logits_equal_torch_quantized(
    tiny_artifact: tuple[Path, dict[str, Any]], tiny_model: LoadedModel
) -> None:
    """With weights dequantized at load (memory=normal) MNN matches torch to float rounding."""
    from edgellm.host.evaluate.scorers import MnnScorer, TorchScorer
    from edgellm.host.quantize.apply import quantize_model
    from edgellm.host.quantize.plan import preset

    path, _ = tiny_artifact
    ids = tiny_model.eval_ids[:64]
    scorer = MnnScorer(path, {"memory": "normal"})
    mnn = scorer(ids)
    assert np.array_equal(mnn, scorer(ids))  # deterministic run to run
    # The torch side is rebuilt from the integers in the artifact, not from the quantizer.
    import copy

    model = copy.deepcopy(tiny_model.model)
    quantize_model(model, preset("int8"), None)  # any plan: weights are overwritten next
    slots = mnn_weights.linears(mnn_weights.graph_json(path))
    for op, slot in slots.items():
        name = "lm_head" if "lm_head" in op else "model." + op.strip("/").rsplit("/", 1)[0].replace("/", ".")
        q = mnn_weights.read(path / "llm.mnn.weight", slot)
        with torch.no_grad():
            model.get_submodule(name).weight.copy_(q.dequantize())
    torch_logits = TorchScorer(model)(ids)
    # AWQ/GPTQ norms are unchanged here (GPTQ), so only the carried weights matter.
    assert np.abs(mnn - torch_logits).max() < 1e-3


def test_carry_refuses_a_graph_linear_without_weights(tiny_artifact: tuple[Path, dict[str, Any]]) -> None:
    from edgellm.host.quantize.adapter import DecoderAdapter

    path, _ = tiny_artifact
    q = {"lm_head": rtn_quantize(torch.zeros(49152, 64), 8, 0)}
    with pytest.raises(ValueError, match="no carried weights"):
        carry_weights(path, q, DecoderAdapter())


def test_mnn_weights_pack_order_high_nibble_first(tmp_path: Path) -> None:
    q = rtn_quantize(torch.arange(32, dtype=torch.float32).reshape(1, 32), 4, 32)
    packed = mnn_weights._pack(q)
    assert packed[0] == (int(q.codes[0, 0]) << 4 | int(q.codes[0, 1]))


def test_int8_kv_modes_measured_on_decode_path(tiny_artifact: tuple[Path, dict[str, Any]]) -> None:
    from edgellm.host.evaluate.artifact import kv_cache_delta
    from edgellm.host.evaluate.evaluate import EvalConfig

    path, _ = tiny_artifact
    ids = list(range(1000, 1064))
    out = kv_cache_delta(path, ids, EvalConfig(tokens=64, context=64, stride=64), (8, 10))
    assert set(out) == {"8", "10"} and out["8"]["tokens"] == 63
    assert all(np.isfinite(v["ppl"]) for v in out.values())


def test_rows_read_from_the_weight_file_equal_the_whole_linears_rows(
    tiny_artifact: tuple[Path, dict[str, Any]],
) -> None:
    """``read_rows`` reads only a range's bytes and decodes exactly what ``read`` gives for those rows."""
    path, _ = tiny_artifact
    weight_file = path / "llm.mnn.weight"
    slots = mnn_weights.linears(mnn_weights.graph_json(path))
    assert {s.bits for s in slots.values()} == {4, 8}  # both packings
    for slot in slots.values():
        whole = mnn_weights.read(weight_file, slot)
        for part in (slice(0, 1), slice(3, 17), slice(slot.oc - 5, slot.oc), slice(0, slot.oc)):
            got, want = mnn_weights.read_rows(weight_file, slot, part), whole.rows(part)
            assert torch.equal(got.codes, want.codes) and torch.equal(got.scale, want.scale)
            assert torch.equal(got.zero, want.zero) and (got.bits, got.block) == (want.bits, want.block)
    with pytest.raises(ValueError, match="not a forward range"):
        mnn_weights.read_rows(weight_file, slot, slice(0, 8, 2))


def test_the_gates_head_read_from_the_artifact_equals_the_head_from_the_integers_in_memory(
    tiny_artifact: tuple[Path, dict[str, Any]], tiny_model: LoadedModel
) -> None:
    """A build frees lm_head's integers before the gate and reads them back from the artifact by rows."""
    from edgellm.host.convert.reference import PendingHead, final_hidden, quantized_head, whole

    path, _ = tiny_artifact
    slot = mnn_weights.linears(mnn_weights.graph_json(path))["/lm/lm_head/Linear"]
    weight_file = path / "llm.mnn.weight"
    model = tiny_model.model
    hidden = final_hidden(model, [tiny_model.eval_ids[:300]])[0]
    pending = PendingHead(hidden, model.config, None)
    from_file = pending.logits(lambda part: mnn_weights.read_rows(weight_file, slot, part), slot.oc)
    in_memory = quantized_head(mnn_weights.read(weight_file, slot), model.config)
    assert from_file.vocab == slot.oc == 49152
    assert np.array_equal(whole(from_file), in_memory(hidden).numpy())
