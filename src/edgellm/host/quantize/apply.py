"""Apply a plan to a torch model, layer by layer, and collect the integer weights it produced.

Layer inputs come from the already-quantized previous layers (as in GPTQ's sequential mode),
so errors are corrected downstream. The model is left holding the dequantized weights: it *is*
the torch quantized model that evaluation compares against the MNN artifact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext

import structlog
import torch
from torch import nn

from edgellm.host.quantize.adapter import DecoderAdapter, ScaleGroup, adapter_for
from edgellm.host.quantize.awq import AwqScale, AwqSearch, apply_scale
from edgellm.host.quantize.device import CPU, layer_on, to_host
from edgellm.host.quantize.gptq import GPTQ
from edgellm.host.quantize.grid import QuantizedWeight, check_finite, rtn_quantize
from edgellm.host.quantize.plan import LayerSpec, QuantPlan

log = structlog.get_logger(__name__)
Progress = Callable[[float, str], None]
# Brings decoder layer i into memory for the block (a streamed model's; builder/streamed.py).
Materialize = Callable[[int], AbstractContextManager[object]]
# The dtype a streamed checkpoint stores a tensor in (builder/streamed.py): AWQ's folded norms and
# biases are rounded to it, since the export then reads them from a checkpoint in that dtype.
StoredDtype = Callable[[str], torch.dtype]
LM_HEAD_ROWS = 2048  # lm_head rows RTN-quantized at a time (quantize_lm_head says why)


def _noop(_fraction: float, _message: str) -> None:
    return None


def run_layer(
    adapter: DecoderAdapter, model: nn.Module, index: int, hidden: torch.Tensor, batch: int = 8
) -> torch.Tensor:
    """Run decoder layer ``index`` over every sample of ``hidden``: [N, T, H] -> [N, T, H].

    The one layer walker: quantization's calibration passes and the conversion gate's torch
    reference (convert/reference.py) both call it.
    """
    outs = []
    layer = adapter.layers(model)[index]
    kwargs = adapter.layer_kwargs(model, hidden[:1], index)
    for i in range(0, hidden.shape[0], batch):
        out = layer(hidden[i : i + batch], **kwargs)
        outs.append(out[0] if isinstance(out, tuple) else out)
    return torch.cat(outs)


def _collect(
    adapter: DecoderAdapter,
    model: nn.Module,
    index: int,
    hidden: torch.Tensor,
    sinks: Mapping[str, Callable[[torch.Tensor], None]],
) -> None:
    """One forward pass of layer ``index`` feeding each named linear's input to its sink."""
    layer = adapter.layers(model)[index]
    handles = []
    for short, sink in sinks.items():

        def hook(
            _m: nn.Module,
            args: tuple[torch.Tensor, ...],
            _out: torch.Tensor,
            sink: Callable[[torch.Tensor], None] = sink,
        ) -> None:
            sink(args[0])

        handles.append(layer.get_submodule(short).register_forward_hook(hook))
    try:
        run_layer(adapter, model, index, hidden)
    finally:
        for h in handles:
            h.remove()


def _linear(parent: nn.Module, name: str) -> nn.Linear:
    lin = parent.get_submodule(name)
    if not isinstance(lin, nn.Linear):
        raise TypeError(f"{name} is {type(lin).__name__}, not a Linear")
    return lin


@torch.no_grad()
def quantize_model(
    model: nn.Module,
    plan: QuantPlan,
    calib_ids: torch.Tensor | None,
    progress: Progress = _noop,
    device: torch.device = CPU,
    materialize: Materialize | None = None,
    stored: StoredDtype | None = None,
) -> tuple[dict[str, QuantizedWeight], list[AwqScale]]:
    """Quantize ``model`` in place per ``plan``; return integer weights by module name and AWQ scales.

    Each decoder layer is computed on ``device`` (device.py), one at a time; the model stays on the CPU.
    ``materialize(i)`` holds layer i in memory while it is quantized (a streamed model's layers are
    read from the checkpoint only then); the calibration's hidden states are all that pass between.
    ``stored``: round what AWQ folds outside the linears to the dtype the checkpoint stores it in.
    """
    enter = materialize or (lambda _i: nullcontext())
    adapter = adapter_for(model)
    specs = adapter.resolve(plan, model)
    needs_data = any(s.method != "rtn" for s in specs.values())
    if needs_data and calib_ids is None:
        raise ValueError("AWQ and GPTQ need calibration data")
    layers = adapter.layers(model)
    hidden = adapter.embed(model, calib_ids) if needs_data and calib_ids is not None else None  # [N, T, H]
    hidden = None if hidden is None else hidden.to(device)
    # layer_kwargs computes RoPE with the model's rotary module: it goes to the device with each layer.
    aux = () if device.type == "cpu" else (model.get_submodule("model.rotary_emb"),)
    out: dict[str, QuantizedWeight] = {}
    scales: list[AwqScale] = []
    for i, layer in enumerate(layers):
        prefix = f"model.layers.{i}."
        spec = {k.removeprefix(prefix): v for k, v in specs.items() if k.startswith(prefix)}
        with enter(i), layer_on(device, layer, *aux):
            hidden = _quantize_layer(adapter, model, i, hidden, spec, plan, out, scales, stored)
        progress((i + 1) / (len(layers) + 1), f"layer {i + 1}/{len(layers)} quantized")
    out["lm_head"] = quantize_lm_head(model, plan)
    progress(1.0, "lm_head quantized")
    return out, scales


def _quantize_layer(
    adapter: DecoderAdapter,
    model: nn.Module,
    i: int,
    hidden: torch.Tensor | None,
    spec: dict[str, LayerSpec],
    plan: QuantPlan,
    out: dict[str, QuantizedWeight],
    scales: list[AwqScale],
    stored: StoredDtype | None = None,
) -> torch.Tensor | None:
    """Quantize layer ``i`` (into ``out`` and ``scales``); its output on the calibration data, if any."""
    prefix = f"model.layers.{i}."
    layer = adapter.layers(model)[i]
    gptq: dict[str, GPTQ] = {}
    if hidden is not None:
        scales += _awq_layer(adapter, model, i, hidden, spec, plan.awq_duo, stored)
        gptq = _gptq_layer(adapter, model, i, hidden, spec)
    for short, v in spec.items():
        out[prefix + short] = to_host(_quantize_linear(_linear(layer, short), v, plan, gptq.get(short)))
    if hidden is None:
        return None
    hidden = run_layer(adapter, model, i, hidden)
    check_finite(hidden, f"layer {i} output")
    return hidden


def _gptq_layer(
    adapter: DecoderAdapter,
    model: nn.Module,
    index: int,
    hidden: torch.Tensor,
    spec: dict[str, LayerSpec],
) -> dict[str, GPTQ]:
    """A GPTQ per linear of this layer that uses it, each holding its Hessian from one calibration pass."""
    layer = adapter.layers(model)[index]
    gptq = {s: GPTQ(_linear(layer, s)) for s, v in spec.items() if v.method == "gptq"}
    if not gptq:
        return gptq
    # Linears in one sequential group read the same input: accumulate one Hessian each.
    leaders = {g[0]: [s for s in g if s in gptq] for g in adapter.sequential}
    leaders = {k: v for k, v in leaders.items() if v}
    _collect(adapter, model, index, hidden, {v[0]: gptq[v[0]].add_batch for v in leaders.values()})
    for members in leaders.values():
        for s in members[1:]:
            gptq[s].hessian = gptq[members[0]].hessian
    return gptq


def _quantize_linear(lin: nn.Linear, v: LayerSpec, plan: QuantPlan, gptq: GPTQ | None) -> QuantizedWeight:
    """Quantize one linear in place (GPTQ when it has one, else round to nearest); return its integers."""
    if gptq is not None:
        q = gptq.quantize(v.bits, v.block, act_order=plan.gptq_act_order, clip_search=plan.gptq_grid == "mse")
        gptq.free()
    else:
        # AWQ rounds on the grid its scale search scored (plan.awq_grid "minmax"): the
        # scales were chosen for min..max ranges, and a clipping search on top undoes them.
        clip = v.method == "awq" and plan.awq_grid == "mse"
        q = rtn_quantize(lin.weight, v.bits, v.block, clip_search=clip)
    lin.weight.copy_(q.dequantize().to(lin.weight.dtype))
    return q


@torch.no_grad()
def quantize_lm_head(model: nn.Module, plan: QuantPlan, rows: int = LM_HEAD_ROWS) -> QuantizedWeight:
    """RTN-quantize the output embedding in place at the plan's lm_head bits/block; return it."""
    lm_head = model.get_output_embeddings()  # type: ignore[operator]
    if not isinstance(lm_head, nn.Linear):
        raise TypeError("model has no linear output embedding")
    w = lm_head.weight  # [V, H]
    # Why by rows: rows are quantized independently (the result is the same bits), and the whole
    # [V, H] at once took ~4 fp32 temporaries of it: 4 GB at Llama-3's 128,256 x 2,048, the
    # largest transient of a streamed convert. Why 2,048 rows: it runs when every layer's integers
    # are held (a convert's quantize-stage peak), and its ~6 fp32 temporaries of [rows, H] were
    # 0.4 GB at 8,192 rows and H = 2,048 (0.1 GB at 2,048).
    parts = []
    for a in range(0, w.shape[0], rows):
        q = rtn_quantize(w[a : a + rows], plan.lm_head_bits, plan.lm_head_block)
        w[a : a + rows].copy_(q.dequantize().to(w.dtype))
        parts.append(q)
    return QuantizedWeight(
        codes=torch.cat([q.codes for q in parts]),
        scale=torch.cat([q.scale for q in parts]),
        zero=torch.cat([q.zero for q in parts]),
        bits=parts[0].bits,
        block=parts[0].block,
    )


def _feeds(prev: nn.Module, group: ScaleGroup, first: nn.Module) -> bool:
    """Whether ``prev``'s output (its ``group.rows``) is exactly ``first``'s input, channel for channel."""
    if not isinstance(prev, nn.Linear) or not isinstance(first, nn.Linear):
        return True  # a norm: same width by construction
    start, end = group.rows or (0, prev.out_features)
    # Grouped-query attention: v's outputs are repeated into o_proj, so no one-to-one channel.
    return end - start == first.in_features


def _awq_layer(
    adapter: DecoderAdapter,
    model: nn.Module,
    index: int,
    hidden: torch.Tensor,
    spec: dict[str, LayerSpec],
    duo: bool = False,
    stored: StoredDtype | None = None,
) -> list[AwqScale]:
    """Search and fold AWQ scales for the groups of one layer whose linears use AWQ."""
    layer = adapter.layers(model)[index]
    prefix = f"model.layers.{index}."
    searches: dict[int, AwqSearch] = {}
    for gi, group in enumerate(adapter.scale_groups):
        if not all(spec[s].method == "awq" for s in group.linears):
            continue
        prev = layer.get_submodule(group.prev)
        lins = [layer.get_submodule(s) for s in group.linears]
        if not _feeds(prev, group, lins[0]):
            continue
        searches[gi] = AwqSearch(lins)  # type: ignore[arg-type]
    if not searches:
        return []
    sinks = {adapter.scale_groups[gi].linears[0]: s.add_batch for gi, s in searches.items()}
    _collect(adapter, model, index, hidden, sinks)
    results = []
    for gi, search in searches.items():
        group = adapter.scale_groups[gi]
        first = spec[group.linears[0]]
        s, ratio, loss, base = search.search(first.bits, first.block, duo=duo)
        search.free()
        prev = layer.get_submodule(group.prev)
        apply_scale(prev, search.linears, s, rows=group.rows, norm_offset=adapter.norm_offset)
        folded = _folded(prev, prefix + group.prev, stored)
        linears = tuple(prefix + n for n in group.linears)
        results.append(AwqScale(prefix + group.prev, linears, s.cpu(), ratio, loss, base, folded))
    return results


@torch.no_grad()
def _folded(prev: nn.Module, name: str, stored: StoredDtype | None) -> dict[str, torch.Tensor]:
    """The tensors of ``prev`` a fold changed that no quantized linear carries, rounded per ``stored``.

    A norm's weight, or a feeding linear's bias (Qwen2's v_proj): its weight is quantized after.
    """
    tensors: dict[str, torch.Tensor]
    if isinstance(prev, nn.Linear):
        tensors = {} if prev.bias is None else {f"{name}.bias": prev.bias}
    else:
        tensors = {f"{name}.weight": prev.get_parameter("weight")}
    for full, t in tensors.items():
        if stored is not None:
            t.copy_(t.to(stored(full)).to(t.dtype))  # what the export's checkpoint will hold
    return {full: t.detach().to(CPU, copy=True) for full, t in tensors.items()}
