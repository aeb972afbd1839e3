"""Architecture adapters: where the decoder layers, linears and AWQ scale groups live, per family.

Algorithms never look at a model class; they ask the adapter built by ``adapter_for`` from the
config's ``model_type`` (the families of ``families.py``). What a family fuses or scales
differently is a field here, each with its own test (tests/quantize/test_families.py):

- Gemma-2/3 normalise with ``x·(1 + w)`` (``norm_offset`` 1), and the MLP reads
  ``pre_feedforward_layernorm`` (``post_attention_layernorm`` normalises the attention *output*).
- Gemma-3 has one rotary per layer type and sliding-window layers (``layer_kwargs``).
- Phi-3 fuses q/k/v into ``qkv_proj`` and gate/up into ``gate_up_proj``: quantized once, written
  into MNN's split q/k/v slots by rows (``mnn_slots``); the down_proj scale group reads only the
  up half of gate_up's rows. A plan rule naming a part (``q_proj``, ``gate_proj``) applies to the
  fused tensor, and one that gives its parts different settings is refused (``parts``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgellm.common.errors import InvalidArgument
from edgellm.host.quantize.families import unsupported_message
from edgellm.host.quantize.plan import LayerSpec, QuantPlan

ATTN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
MLP_IN = ("mlp.gate_proj", "mlp.up_proj")
# An MNN slot of a fused linear: (the torch-style short name llmexport gives it, first row, end row).
RowSlot = tuple[str, int, int]


@dataclass(frozen=True)
class ScaleGroup:
    """An AWQ group: ``prev`` (a norm or linear) feeds every linear in ``linears``.

    ``rows``: when ``prev`` is a fused linear, the [start, end) rows of its output that feed them.
    """

    prev: str
    linears: tuple[str, ...]
    rows: tuple[int, int] | None = None


@dataclass(frozen=True)
class DecoderAdapter:
    """Llama-style decoder: embed -> layers (attention + gated MLP) -> norm -> lm_head."""

    # Groups quantized in order inside a layer; linears in one group share their input.
    sequential: tuple[tuple[str, ...], ...] = (ATTN, ("self_attn.o_proj",), MLP_IN, ("mlp.down_proj",))
    scale_groups: tuple[ScaleGroup, ...] = (
        ScaleGroup("input_layernorm", ATTN),
        ScaleGroup("self_attn.v_proj", ("self_attn.o_proj",)),
        ScaleGroup("post_attention_layernorm", MLP_IN),
        ScaleGroup("mlp.up_proj", ("mlp.down_proj",)),
    )
    # Norms compute x·(norm_offset + w): 0 for Llama-style, 1 for Gemma's (1 + w).
    norm_offset: float = 0.0
    # Gemma-3: ``rotary_emb(x, pos, layer_type)`` (local and global layers have their own theta).
    rotary_per_layer_type: bool = False
    # Fused linear short name -> the MNN slots its rows are written into (Phi-3's qkv_proj).
    fused: Mapping[str, tuple[RowSlot, ...]] = field(default_factory=dict)
    # Fused linear short name -> the split linears it holds, as other families and plans name them:
    # a plan rule for a part applies to the whole tensor, and the parts must agree (plan.py).
    parts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def layers(self, model: nn.Module) -> nn.ModuleList:
        """The decoder layers."""
        layers: nn.ModuleList = model.model.layers  # type: ignore[union-attr,assignment]
        return layers

    def embed(self, model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings: [B, T] -> [B, T, H] (Gemma's embedding module scales by √H itself)."""
        out: torch.Tensor = model.model.embed_tokens(ids)  # type: ignore[operator,union-attr]
        return out

    def final_norm(self, model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """The norm after the last decoder layer: [B, T, H] -> [B, T, H] (what lm_head reads)."""
        norm = model.get_submodule("model.norm")
        out: torch.Tensor = norm(hidden)
        return out

    def layer_kwargs(self, model: nn.Module, hidden: torch.Tensor, index: int = 0) -> dict[str, object]:
        """What layer ``index`` needs besides its input, as the model's own forward passes it.

        RoPE cos/sin (per layer type for Gemma-3); a None mask means causal attention (sdpa), an
        eager-attention model gets the causal mask itself, and a sliding-window layer gets its window
        mask once the calibration length exceeds the window (else GPTQ/AWQ would see attention the
        model never computes).
        """
        config: Any = model.config
        kind = (getattr(config, "layer_types", None) or [None] * (index + 1))[index]
        pos = torch.arange(hidden.shape[1]).unsqueeze(0)  # [1, T]
        rotary: Any = model.model.rotary_emb  # type: ignore[union-attr]
        rope = rotary(hidden, pos, kind) if self.rotary_per_layer_type else rotary(hidden, pos)
        window = getattr(config, "sliding_window", None)
        length = hidden.shape[1]
        mask = None
        if kind == "sliding_attention" and window and length > window:
            mask = sliding_mask(length, int(window), hidden.dtype)
        elif getattr(config, "_attn_implementation", None) == "eager":
            # eager attention (Gemma-2's reference, for its logit soft-cap: families.torch_attention)
            # reads a None mask as "attend everywhere", where sdpa makes it causal: say causal here
            mask = sliding_mask(length, length, hidden.dtype)
        return {"position_embeddings": rope, "attention_mask": mask}

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

    def fused_parts(self, model: nn.Module) -> dict[str, tuple[str, ...]]:
        """Each fused linear's full name -> its parts' full names (Phi-3's qkv_proj -> q/k/v_proj)."""
        return {
            f"model.layers.{i}.{short}": tuple(f"model.layers.{i}.{p}" for p in parts)
            for i in range(len(self.layers(model)))
            for short, parts in self.parts.items()
        }

    def resolve(self, plan: QuantPlan, model: nn.Module) -> dict[str, LayerSpec]:
        """The plan's spec for every linear of ``model``; PlanError for a rule this family cannot apply."""
        return plan.resolve(self.linear_names(model), self.fused_parts(model))

    def mnn_slots(self, module_name: str) -> list[tuple[str, slice | None]]:
        """llmexport's op names for a linear, each with the rows it takes (None: all of them)."""
        parts = module_name.split(".")
        prefix, short = ".".join(parts[:3]), ".".join(parts[3:])  # model.layers.3 | self_attn.qkv_proj
        slots = self.fused.get(short)
        if not slots:
            return [(mnn_op_name(module_name), None)]
        return [(mnn_op_name(f"{prefix}.{name}"), slice(start, end)) for name, start, end in slots]


def mnn_op_name(module_name: str) -> str:
    """llmexport's op name: ``model.layers.3.mlp.up_proj`` -> ``/layers.3/mlp/up_proj/Linear``."""
    if module_name == "lm_head":
        return "/lm/lm_head/Linear"
    parts = module_name.removeprefix("model.").split(".")
    return "/" + ".".join(parts[:2]) + "/" + "/".join(parts[2:]) + "/Linear"


def sliding_mask(length: int, window: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive causal mask where query t sees keys t-window+1..t: [1, 1, T, T] (0 or dtype min)."""
    q = torch.arange(length).view(-1, 1)
    k = torch.arange(length).view(1, -1)
    seen = (k <= q) & (k > q - window)
    return torch.where(seen, 0.0, torch.finfo(dtype).min).to(dtype).view(1, 1, length, length)


def _llama(_config: Any) -> DecoderAdapter:
    return DecoderAdapter()


def _gemma(config: Any) -> DecoderAdapter:
    return DecoderAdapter(
        scale_groups=(
            ScaleGroup("input_layernorm", ATTN),
            ScaleGroup("self_attn.v_proj", ("self_attn.o_proj",)),
            ScaleGroup("pre_feedforward_layernorm", MLP_IN),
            ScaleGroup("mlp.up_proj", ("mlp.down_proj",)),
        ),
        norm_offset=1.0,
        rotary_per_layer_type=config.model_type == "gemma3_text",
    )


def _phi3(config: Any) -> DecoderAdapter:
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    q = config.num_attention_heads * head_dim
    kv = (config.num_key_value_heads or config.num_attention_heads) * head_dim
    inter = int(config.intermediate_size)
    qkv, gate_up = "self_attn.qkv_proj", "mlp.gate_up_proj"
    return DecoderAdapter(
        sequential=((qkv,), ("self_attn.o_proj",), (gate_up,), ("mlp.down_proj",)),
        scale_groups=(
            ScaleGroup("input_layernorm", (qkv,)),
            ScaleGroup(qkv, ("self_attn.o_proj",), rows=(q + kv, q + 2 * kv)),
            ScaleGroup("post_attention_layernorm", (gate_up,)),
            # down_proj reads act(gate) * up: scaling the up rows by 1/s scales its input by 1/s.
            ScaleGroup(gate_up, ("mlp.down_proj",), rows=(inter, 2 * inter)),
        ),
        # llmexport splits qkv_proj by rows into q/k/v ops (measured: 64/32/32 on a tiny Phi-3)
        # and keeps gate_up_proj fused as one op.
        fused={
            qkv: (
                ("self_attn.q_proj", 0, q),
                ("self_attn.k_proj", q, q + kv),
                ("self_attn.v_proj", q + kv, q + 2 * kv),
            )
        },
        parts={qkv: ATTN, gate_up: MLP_IN},
    )


ADAPTERS: dict[str, Callable[[Any], DecoderAdapter]] = {
    "llama": _llama,
    "mistral": _llama,
    "qwen2": _llama,
    "qwen3": _llama,  # q_norm/k_norm are not linears and sit after q/k_proj: the llama rules hold
    "smollm3": _llama,  # same linears; its no-RoPE layers are an export matter
    "gemma2": _gemma,
    "gemma3_text": _gemma,
    "phi3": _phi3,
}


def check_plan_fits(plan: QuantPlan, hf_dir: Path) -> None:
    """Refuse, before any weight is read, a plan whose rules the checkpoint's family cannot take.

    The model is built from ``config.json`` on the meta device (no memory, 0.04 s for a 7B
    shape), so a rule naming no linear or splitting Phi-3's fused qkv fails in well under a
    second instead of after the load. A plan without rules fits every family.
    """
    if not plan.rules or not (hf_dir / "config.json").is_file():
        return
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(hf_dir))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    adapter_for(model).resolve(plan, model)


def adapter_for(model: nn.Module) -> DecoderAdapter:
    """The adapter of the model's family (``config.model_type``), built for its shapes."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in ADAPTERS:
        raise InvalidArgument(unsupported_message(kind))
    return ADAPTERS[str(kind)](config)
