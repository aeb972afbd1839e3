"""A model whose decoder layers live in the checkpoint's shards and come into memory one at a time.

``open_streamed`` loads everything outside the decoder layers (embedding, final norm, lm_head,
RoPE buffers) in fp32 and leaves the layers' parameters on the meta device. A layer is read from
the shards (and cast to fp32, as ``from_pretrained(dtype=float32)`` casts it) when it is entered
and dropped when it is left: explicitly (``with stream.layer(i)``, the quantizer's loop) or by
forward hooks, so ``model(ids)`` runs the model's own forward, bit for bit what the fully loaded
model computes, holding one layer. Linears already quantized are loaded as their dequantized
integers, and tensors AWQ folded scales into (``overrides``) as folded, so the same model then serves
as the torch quantized reference.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog
import torch
from torch import nn

from edgellm.host.convert.shards import (
    read,
    set_parameter,
    skeleton,
    tensor_files,
    tie_embeddings,
    untied_parameters,
)
from edgellm.host.quantize.grid import QuantizedWeight

log = structlog.get_logger(__name__)
LAYERS = "model.layers"


class LayerStream:
    """Materialises decoder layer ``i`` of a skeleton model on entry, releases it on exit."""

    def __init__(
        self, model: nn.Module, files: Mapping[str, Path], dtype: torch.dtype = torch.float32
    ) -> None:
        self.model = model
        self.files = files
        self.dtype = dtype
        self.layers: nn.ModuleList = model.get_submodule(LAYERS)  # type: ignore[assignment]
        self.quantized: Mapping[str, QuantizedWeight] = {}  # full linear name -> its integers
        self.overrides: Mapping[str, torch.Tensor] = {}  # full name -> AWQ's folded norm or bias
        self._stored: dict[str, torch.dtype] = {}  # full name -> the dtype its shard stores
        self._depth = [0] * len(self.layers)
        self.loads = 0  # layer reads from the shards, for tests and logs
        self.max_live = 0  # most layers materialised at once (1 when streaming works)
        for i, layer in enumerate(self.layers):
            layer.register_forward_pre_hook(lambda _m, _a, i=i: self._enter(i))
            layer.register_forward_hook(lambda _m, _a, _o, i=i: self._exit(i))

    @contextmanager
    def layer(self, index: int) -> Iterator[nn.Module]:
        """Layer ``index`` with real weights for the duration of the block."""
        self._enter(index)
        try:
            yield self.layers[index]
        finally:
            self._exit(index)

    def stored_dtype(self, name: str) -> torch.dtype:
        """The dtype the checkpoint stores tensor ``name`` in (known once its layer was read)."""
        return self._stored[name]

    def live(self) -> int:
        """Layers holding real weights now."""
        return sum(1 for d in self._depth if d > 0)

    def _enter(self, index: int) -> None:
        self._depth[index] += 1
        if self._depth[index] == 1:
            self._load(index)
            self.max_live = max(self.max_live, self.live())

    def _exit(self, index: int) -> None:
        self._depth[index] -= 1
        if self._depth[index] == 0:
            _release(self.layers[index])

    @torch.no_grad()
    def _load(self, index: int) -> None:
        prefix = f"{LAYERS}.{index}."
        layer = self.layers[index]
        names = [prefix + n for n in untied_parameters(layer)]
        for name, tensor in read(self.files, names).items():
            self._stored[name] = tensor.dtype
            set_parameter(layer, name.removeprefix(prefix), tensor.to(self.dtype))
        for name, q in self.quantized.items():
            if name.startswith(prefix):
                weight: torch.Tensor = layer.get_submodule(name.removeprefix(prefix)).weight  # type: ignore[assignment]
                weight.copy_(q.dequantize().to(weight.dtype))  # as quantize_model left it in place
        for name, folded in self.overrides.items():
            if name.startswith(prefix):
                layer.get_parameter(name.removeprefix(prefix)).copy_(folded)
        self.loads += 1


def _release(layer: nn.Module) -> None:
    """Put every parameter of ``layer`` back on the meta device (its storage is freed)."""
    for module in layer.modules():
        for leaf, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[leaf] = nn.Parameter(
                    torch.empty_like(p, device="meta"), requires_grad=False
                )


def streamable(hf_dir: Path) -> bool:
    """Whether ``hf_dir`` is a safetensors checkpoint (the layers can then be read one at a time)."""
    return bool(tensor_files(hf_dir))


def open_streamed(hf_dir: Path, dtype: torch.dtype = torch.float32) -> tuple[Any, LayerStream]:
    """The checkpoint's model with all but its decoder layers loaded in ``dtype``, and its stream.

    Raises KeyError when a parameter's name is not in the checkpoint (a format whose names
    transformers converts while loading); the caller then loads the whole model instead.
    """
    files = tensor_files(hf_dir)
    model: Any = skeleton(hf_dir, dtype)
    tie_embeddings(model)  # one parameter under its first name, as the checkpoint stores it
    resident = [n for n in untied_parameters(model) if not n.startswith(LAYERS + ".")]
    missing = [n for n in untied_parameters(model) if n not in files]
    if missing:
        raise KeyError(f"checkpoint {hf_dir} has no tensor {missing[0]} ({len(missing)} missing)")
    with torch.no_grad():
        for name, tensor in read(files, resident).items():
            set_parameter(model, name, tensor.to(dtype))
    tie_embeddings(model)
    return model, LayerStream(model, files, dtype)
