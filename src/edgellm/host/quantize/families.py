"""The model families edgellm builds, and the refusal of any other before the long work starts.

Reads only a checkpoint's ``config.json`` (no torch, no weight hashing), so ``edgellm convert`` /
``quantize`` and HostService refuse an unsupported family in well under a second instead of after
hashing and loading every weight file. ``adapter.py`` holds each family's quantization rules.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgellm.common.errors import InvalidArgument

# config.json model_type -> the models people bring of that family (for messages and docs).
FAMILIES: dict[str, str] = {
    "llama": "Llama-2, Llama-3.x (llama3 rope scaling), SmolLM2",
    "mistral": "Mistral-7B",
    "qwen2": "Qwen2, Qwen2.5",
    "qwen3": "Qwen3 (q/k norm)",
    "gemma2": "Gemma-2",
    "gemma3_text": "Gemma-3 text models (gemma-3-1b, or the text part saved as Gemma3ForCausalLM)",
    "phi3": "Phi-3, Phi-3.5-mini, Phi-4-mini (fused qkv and gate_up)",
    "smollm3": "SmolLM3",
}

# Families a user may try that have a supported sibling: say what to do instead.
_ADVICE: dict[str, str] = {
    "gemma3": "this is Gemma-3's multimodal checkpoint (vision tower + text); edgellm builds text models "
    "only: use a text-only Gemma-3 (model_type gemma3_text, e.g. gemma-3-1b-it) or save the language "
    "model alone with Gemma3ForCausalLM",
}


def supported() -> list[str]:
    """The supported ``model_type`` values, sorted."""
    return sorted(FAMILIES)


def unsupported_message(kind: object) -> str:
    """Why ``kind`` is refused, naming every supported family."""
    advice = _ADVICE.get(str(kind))
    head = f"model family {kind!r} is not supported" + (f" ({advice})" if advice else "")
    return f"{head}; supported: {', '.join(supported())}"


def model_type(hf_dir: Path) -> object:
    """``config.json``'s ``model_type`` (None when it names none)."""
    try:
        config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{hf_dir / 'config.json'} is not valid JSON: {exc}") from exc
    return config.get("model_type") if isinstance(config, dict) else None


def gguf_model_type(path: Path) -> str:
    """The model_type a GGUF file becomes, from its header's ``general.architecture`` alone."""
    from edgellm.host.convert.gguf_header import GGUF_ARCHITECTURES, architecture

    arch = architecture(path)
    if arch not in GGUF_ARCHITECTURES:
        raise InvalidArgument(
            f"GGUF architecture {arch!r} is not supported; supported GGUF architectures: "
            f"{', '.join(sorted(GGUF_ARCHITECTURES))} (as HF checkpoints: {', '.join(supported())})"
        )
    return GGUF_ARCHITECTURES[arch]


def check_supported(model: str) -> None:
    """Refuse ``model`` ("default", an HF checkpoint dir or a GGUF file) if its family is not supported.

    Anything else is left to ``resolve_source``, which says why.
    """
    from edgellm.host.convert.gguf_header import is_gguf

    path = Path(model)
    if model == "default":
        return
    if path.is_file() and is_gguf(path):
        gguf_model_type(path)
        return
    if not (path / "config.json").is_file():
        return
    kind = model_type(path)
    if kind not in FAMILIES:
        raise InvalidArgument(unsupported_message(kind))


def torch_attention(config: object) -> dict[str, str]:
    """Keyword arguments that make a torch load of ``config``'s model compute the attention it defines.

    ``config`` is a transformers config or a checkpoint directory. Why: transformers' default
    ``sdpa`` attention drops Gemma-2's ``attn_logit_softcapping`` (its ``sdpa_attention_forward``
    takes ``softcap`` in ``**kwargs`` and ignores it; only ``eager`` applies the cap): on a tiny
    gemma2 with q/k scaled 24x (attention logits of std ~4) the two differ by up to 1.35 in the
    logits. The gate and evaluation compare MNN against this reference, so it must be the model's.
    """
    if isinstance(config, Path):
        try:
            raw = json.loads((config / "config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}  # resolve_source / from_pretrained say what is wrong with the directory
        cap = raw.get("attn_logit_softcapping") if isinstance(raw, dict) else None
    else:
        cap = getattr(config, "attn_logit_softcapping", None)
    return {"attn_implementation": "eager"} if cap is not None else {}
