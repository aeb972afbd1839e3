"""Layer streaming (builder/streamed.py): the same numbers as the whole fp32 model, one layer in memory.

Tiny random-weight checkpoints of three families (tests/tiny_families.py): Llama, Qwen2 (q/k/v
biases) and Phi-3 (fused qkv and gate_up). For each, the streamed model's logits, RTN's and GPTQ's
integers and the quantized reference logits must equal the fully loaded model's bit for bit, and no
forward or quantization may ever hold more than one decoder layer's weights.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from edgellm.host.builder.loaded import load_model
from edgellm.host.builder.streamed import LayerStream, open_streamed
from edgellm.host.convert.shards import is_placeholder, load_without_linears, read, tensor_files
from edgellm.host.quantize.apply import quantize_lm_head, quantize_model
from edgellm.host.quantize.grid import QuantizedWeight, rtn_quantize
from edgellm.host.quantize.plan import preset
from tests.tiny_families import build_tiny

FAMILIES = ("llama", "qwen2", "phi3")
IDS = torch.tensor([list(range(3, 200, 2))])  # [1, 99]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("streamed")
    return {f: build_tiny(f, root / f) for f in FAMILIES}


def real_layers(stream: LayerStream) -> int:
    """Decoder layers holding any real (non-meta) parameter now, counted from the tensors themselves."""
    return sum(any(p.device.type != "meta" for p in layer.parameters()) for layer in stream.layers)


def watch(stream: LayerStream) -> list[int]:
    """Record ``real_layers`` as every layer's forward starts (an independent check of ``max_live``)."""
    seen: list[int] = []
    for layer in stream.layers:  # after the stream's own pre-hook, which loads the layer
        layer.register_forward_pre_hook(lambda *_: seen.append(real_layers(stream)))
    return seen


def same_weights(a: dict[str, QuantizedWeight], b: dict[str, QuantizedWeight]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k].codes, b[k].codes)
        and torch.equal(a[k].scale, b[k].scale)
        and torch.equal(a[k].zero, b[k].zero)
        for k in a
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_streamed_logits_equal_the_whole_model_and_hold_one_layer(
    family: str, checkpoints: dict[str, Path]
) -> None:
    full, _ = load_model(checkpoints[family])
    model, stream = open_streamed(checkpoints[family])
    assert real_layers(stream) == 0  # opening reads no layer
    seen = watch(stream)
    with torch.inference_mode():
        assert torch.equal(model(IDS).logits, full(IDS).logits)
    assert seen and max(seen) == 1 and stream.max_live == 1 and real_layers(stream) == 0
    assert stream.loads == len(stream.layers)


@pytest.mark.parametrize("family", ["llama", "phi3"])  # plain and fused linears
@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_streamed_quantization_gives_the_same_integers_and_reference(
    family: str, method: str, checkpoints: dict[str, Path]
) -> None:
    plan = preset("int4", method=method, block=32)
    calib = (
        None
        if method == "rtn"
        else torch.randint(0, 1000, (4, 32), generator=torch.Generator().manual_seed(0))
    )
    full, _ = load_model(checkpoints[family])
    expected, _ = quantize_model(full, plan, calib)
    model, stream = open_streamed(checkpoints[family])
    seen = watch(stream)
    got, _ = quantize_model(model, plan, calib, materialize=stream.layer)
    assert same_weights(got, expected)
    stream.quantized = got
    with torch.inference_mode():
        assert torch.equal(model(IDS).logits, full(IDS).logits)  # the torch quantized reference
    assert stream.max_live == 1 and real_layers(stream) == 0
    assert not seen or max(seen) == 1


def test_the_export_child_loads_no_linear_weight_but_every_other_tensor(checkpoints: dict[str, Path]) -> None:
    hf = checkpoints["qwen2"]
    model: Any = load_without_linears(hf)
    stored = read(tensor_files(hf), tensor_files(hf))
    linears = [
        n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.startswith("model.layers")
    ]
    assert linears and all(is_placeholder(model.get_submodule(n).weight) for n in linears)
    assert is_placeholder(model.get_input_embeddings().weight)  # tied: only lm_head's carried rows are read
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    real = {n: p for n, p in model.named_parameters() if not is_placeholder(p)}
    assert any(n.endswith("q_proj.bias") for n in real)
    for name, p in real.items():
        assert torch.equal(p, stored[name].to(p.dtype)), name


def test_lm_head_quantized_by_rows_is_the_whole_matrix_quantized_at_once(
    checkpoints: dict[str, Path],
) -> None:
    model, _ = load_model(checkpoints["llama"])
    head = model.get_output_embeddings().weight
    plan = replace(preset("int4", method="rtn", block=32), lm_head_block=32)
    whole = rtn_quantize(head, plan.lm_head_bits, plan.lm_head_block)
    by_rows = quantize_lm_head(model, plan, rows=7)
    assert same_weights({"lm_head": by_rows}, {"lm_head": whole})
    assert torch.equal(head, whole.dequantize())
