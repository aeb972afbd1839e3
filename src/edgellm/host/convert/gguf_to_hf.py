"""Dequantize a GGUF into a plain Hugging Face checkpoint directory (cached by hash)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

EXPECTED_ROPE_THETA = 100000.0  # SmolLM2 (DESIGN.md); llmexport silently falls back to 10000
_DONE_MARKER = ".edgellm-complete"


def rope_theta_of(config: dict[str, Any]) -> float | None:
    """Read rope theta from a config dict, wherever this transformers version put it."""
    # transformers 5.x moved it into rope_parameters; 4.x kept it at the top level.
    params = config.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    if "rope_theta" in config:
        return float(config["rope_theta"])
    return None


def check_rope_theta(hf_dir: Path, expected: float = EXPECTED_ROPE_THETA) -> float:
    """Raise ValueError unless ``hf_dir/config.json`` carries the expected rope theta."""
    config = json.loads((hf_dir / "config.json").read_text())
    theta = rope_theta_of(config)
    if theta is None or abs(theta - expected) > 1e-3 * expected:
        raise ValueError(f"{hf_dir}/config.json has rope theta {theta}, expected {expected}")
    return theta


def _fix_special_tokens(tokenizer: Any, config: Any) -> None:
    """Point the tokenizer's eos/bos at the ids the GGUF metadata names."""
    # Why: transformers 5.17's GGUF tokenizer conversion sets eos_token to <|im_start|>
    # (id 1) although the GGUF says eos id 2 (<|im_end|>); llmexport copies the tokenizer's
    # eos into tokenizer.mtok as the stop token, so MNN would not stop at end of turn.
    for attr in ("eos", "bos"):
        token_id = getattr(config, f"{attr}_token_id", None)
        if isinstance(token_id, int):
            setattr(tokenizer, f"{attr}_token", tokenizer.convert_ids_to_tokens(token_id))


def gguf_to_hf(gguf_path: Path, out_dir: Path, *, force: bool = False) -> Path:
    """Write a float32 HF checkpoint + tokenizer for ``gguf_path`` into ``out_dir``."""
    if not force and (out_dir / _DONE_MARKER).is_file():
        log.info("hf_cache_hit", path=str(out_dir))
        return out_dir
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log.info("gguf_dequantize_start", gguf=str(gguf_path))
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    # Why: the GGUF loader records a quantization_config, but the weights are now
    # dequantized floats; leaving it makes downstream loaders (llmexport) treat the
    # checkpoint as quantized, and transformers 5 refuses to save a model that still
    # holds its (non-serializable) GGUF quantizer.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None  # type: ignore[assignment]
    model.is_quantized = False  # type: ignore[assignment]
    _fix_special_tokens(tokenizer, model.config)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    config_path = tmp / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    check_rope_theta(tmp)
    (tmp / _DONE_MARKER).write_text(str(gguf_path) + "\n")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.replace(out_dir)
    log.info("gguf_dequantize_done", path=str(out_dir))
    return out_dir
