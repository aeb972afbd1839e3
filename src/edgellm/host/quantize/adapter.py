"""Architecture adapters: where the decoder layers, linears and AWQ scale groups live.

Algorithms never look at a model class; they ask the adapter picked from ``ADAPTERS`` by the
config's ``model_type``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from edgellm.common.errors import InvalidArgument


@dataclass(frozen=True)
class ScaleGroup:
    """An AWQ group: ``prev`` (a norm or linear) feeds every linear in ``linears``."""

    prev: str
    linears: tuple[str, ...]


@dataclass(frozen=True)
class DecoderAdapter:
    """Llama-style decoder: embed -> layers (attention + gated MLP) -> norm -> lm_head."""

    # Groups quantized in order inside a layer; linears in one group share their input.
    sequential: tuple[tuple[str, ...], ...] = (
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        ("self_attn.o_proj",),
        ("mlp.gate_proj", "mlp.up_proj"),
        ("mlp.down_proj",),
    )
    scale_groups: tuple[ScaleGroup, ...] = (
        ScaleGroup("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
        ScaleGroup("self_attn.v_proj", ("self_attn.o_proj",)),
        ScaleGroup("post_attention_layernorm", ("mlp.gate_proj", "mlp.up_proj")),
        ScaleGroup("mlp.up_proj", ("mlp.down_proj",)),
    )

    def layers(self, model: nn.Module) -> nn.ModuleList:
        """The decoder layers."""
        layers: nn.ModuleList = model.model.layers  # type: ignore[union-attr,assignment]
        return layers

    def embed(self, model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings: [B, T] -> [B, T, H]."""
        out: torch.Tensor = model.model.embed_tokens(ids)  # type: ignore[operator,union-attr]
        return out

    def layer_kwargs(self, model: nn.Module, hidden: torch.Tensor) -> dict[str, object]:
        """Extra arguments a layer needs (RoPE cos/sin); a None mask means causal attention."""
        pos = torch.arange(hidden.shape[1]).unsqueeze(0)  # [1, T]
        return {"position_embeddings": model.model.rotary_emb(hidden, pos)}  # type: ignore[operator,union-attr]

    def linear_names(self, model: nn.Module) -> dict[str, int]:
        """Every quantizable linear inside the layers: full module name -> input width."""
        out: dict[str, int] = {}
        for i, layer in enumerate(self.layers(model)):
            for group in self.sequential:
                for short in group:
                    lin = layer.get_submodule(short)
                    assert isinstance(lin, nn.Linear)
                    out[f"model.layers.{i}.{short}"] = lin.in_features
        return out

    def mnn_op_name(self, module_name: str) -> str:
        """llmexport's op name: ``model.layers.3.mlp.up_proj`` -> ``/layers.3/mlp/up_proj/Linear``."""
        if module_name == "lm_head":
            return "/lm/lm_head/Linear"
        parts = module_name.removeprefix("model.").split(".")
        return "/" + ".".join(parts[:2]) + "/" + "/".join(parts[2:]) + "/Linear"


ADAPTERS: dict[str, Callable[[], DecoderAdapter]] = {
    "llama": DecoderAdapter,
    "mistral": DecoderAdapter,
    "qwen2": DecoderAdapter,
    # Registered only so the exporter fixes can be exercised (issue 28, EXPORT branch): RTN/GPTQ
    # are right for them; AWQ on Gemma's (1+w) norms is not. The family registry replaces this.
    "qwen3": DecoderAdapter,
    "smollm3": DecoderAdapter,
    "gemma2": DecoderAdapter,
    "gemma3_text": DecoderAdapter,
}


def adapter_for(model: nn.Module) -> DecoderAdapter:
    """The adapter registered for the model's ``config.model_type``."""
    kind = getattr(getattr(model, "config", None), "model_type", None)
    if kind not in ADAPTERS:
        raise InvalidArgument(
            f"no quantization adapter for model type {kind!r}; supported: {sorted(ADAPTERS)}"
        )
    return ADAPTERS[str(kind)]()
