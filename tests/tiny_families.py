"""Tiny random-weight checkpoints of every model family edgellm is asked to build (issue 28).

Each is built from its family's own transformers config class (no download): 4 layers, hidden 64,
GQA, the bundled SmolLM2 tokenizer. What a family does differently is switched on at a size the
tests reach: a sliding window of 32 (Gemma), both Gemma-3 layer kinds, SmolLM3's no-RoPE layers,
Llama-3's rope scaling with a context past its original 8,192, Phi-3's fused qkv/gate_up.

Random weights give flat next-token distributions (perplexity near the vocabulary size), on which
any agreement statistic is decided by near-ties; `peaked=True` scales the final norm so torch's
top-1 is clear at most positions, as a trained model's is.

    path = build_tiny("qwen3", tmp_path / "qwen3")

With `chat=True` the tokenizer also gets the family's own chat template
(tests/fixtures/chat_templates/<family>.jinja) and special tokens, and the model's vocabulary
grows to hold them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# The family's model_type -> (config class name, model class name, config overrides).
# The final norm's gain: logits of std ≈ 5 (flat models: ≈ 0.16), so most positions have a clear top-1.
NORM_GAIN = 32.0
LAYERS = 4  # decoder layers of every tiny checkpoint
COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 49152,
    "max_position_embeddings": 2048,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {"tie_word_embeddings": True, "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0}},
    ),
    "llama3": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            "tie_word_embeddings": True,
            "max_position_embeddings": 131072,
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"tie_word_embeddings": True, "head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 16, "sliding_window": 32}),
    "gemma3_text": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            "head_dim": 16,
            "sliding_window": 32,
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        },
    ),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}),
    "smollm3": (
        "SmolLM3Config",
        "SmolLM3ForCausalLM",
        {"tie_word_embeddings": True, "no_rope_layers": [1, 1, 1, 0]},
    ),
}


TEMPLATES = Path(__file__).parent / "fixtures" / "chat_templates"
# The family -> (its template file, bos, eos, the special tokens its template emits, and its call
# tags where the real tokenizer has them as one token: Qwen's <tool_call>, Mistral v0.3's
# [TOOL_CALLS], Llama-3.1's <|python_tag|>). The llama family keeps SmolLM2's own ChatML template
# (SmolLM2 is a llama).
CHAT: dict[str, tuple[str | None, str | None, str | None, tuple[str, ...]]] = {
    "llama": (None, None, None, ()),
    "llama3": (
        "llama3",
        "<|begin_of_text|>",
        "<|eot_id|>",
        ("<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>"),
    ),
    "mistral": ("mistral", "<s>", "</s>", ("[INST]", "[/INST]", "[TOOL_CALLS]")),
    "qwen2": ("qwen2", None, "<|im_end|>", ("<tool_call>", "</tool_call>")),
    "qwen3": ("qwen3", None, "<|im_end|>", ("<think>", "</think>", "<tool_call>", "</tool_call>")),
    "gemma2": ("gemma2", "<bos>", "<eos>", ("<start_of_turn>", "<end_of_turn>")),
    "gemma3_text": ("gemma3_text", "<bos>", "<eos>", ("<start_of_turn>", "<end_of_turn>")),
    "phi3": ("phi3", None, "<|endoftext|>", ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")),
    "smollm3": ("smollm3", None, "<|im_end|>", ()),
}


def chat_tokenizer(family: str) -> Any:
    """SmolLM2's tokenizer with FAMILY's chat template, bos/eos and special tokens."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir()))
    template, bos, eos, extra = CHAT[family]
    specials = [t for t in (bos, eos, *extra) if t is not None and t not in tok.get_vocab()]
    tok.add_special_tokens({"additional_special_tokens": specials}, replace_extra_special_tokens=False)
    if bos is not None:
        tok.bos_token = bos
    if eos is not None:
        tok.eos_token = eos
    if template is not None:
        tok.chat_template = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    return tok


def tokenizer_dir() -> Path:
    """The bundled default model's checkpoint directory (its tokenizer serves every tiny model)."""
    from edgellm.host.builder.source import checkpoint, resolve_source

    return checkpoint(resolve_source("default"))


def tiny_config(family: str, **overrides: Any) -> Any:
    """The family's transformers config at the tiny shape."""
    import transformers

    config_class, _, extra = FAMILIES[family]
    return getattr(transformers, config_class)(**{**COMMON, **extra, **overrides})


def tiny_model(family: str, *, peaked: bool = True, seed: int = 0, **overrides: Any) -> Any:
    """A random-weight `family` model in fp32 and eval mode, in memory (see `build_tiny`)."""
    import transformers

    _, model_class, _ = FAMILIES[family]
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(tiny_config(family, **overrides))
    if peaked:
        with torch.no_grad():
            # A larger final norm sharpens every next-token distribution, as training does. Gemma's
            # norm multiplies by (1 + w), the others by w.
            norm = model.model.norm.weight
            norm.mul_(NORM_GAIN) if family not in ("gemma2", "gemma3_text") else norm.add_(NORM_GAIN - 1.0)
    return model.eval()


def build_tiny(
    family: str, out: Path, *, peaked: bool = True, seed: int = 0, chat: bool | str = False, **overrides: Any
) -> Path:
    """Save a random-weight `family` checkpoint (safetensors + tokenizer) into `out`; returns `out`.

    `chat=True` gives it its family's chat tokenizer, `chat="gemma2"` another family's (a template
    test on an architecture every build supports).
    """
    import transformers

    tokenizer = chat_tokenizer(family if chat is True else chat) if chat else None
    if tokenizer is not None:
        tok_ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
        overrides = {"vocab_size": len(tokenizer), **tok_ids, **overrides}
    model = tiny_model(family, peaked=peaked, seed=seed, **overrides)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    if tokenizer is None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir()))
    tokenizer.save_pretrained(str(out))
    return out


def sensitive_plan(method: str) -> dict[str, Any]:
    """docs/quantization.md's sensitive-layers plan at the tiny depth, as plan JSON.

    Attention's q/k/v and the first and last block at INT8, the rest INT4, lm_head INT8: every
    family takes it as written (Phi-3's fused qkv_proj gets the q/k/v rule whole).
    """
    return {
        "name": "sensitive",
        "method": method,
        "bits": 4,
        "block": 32,
        "rules": [
            *({"pattern": f"*.self_attn.{p}_proj", "bits": 8} for p in "qkv"),
            {"pattern": "model.layers.0.*", "bits": 8},
            {"pattern": f"model.layers.{LAYERS - 1}.*", "bits": 8},
        ],
        "lm_head_bits": 8,
        "lm_head_block": 32,
    }
