"""Write a GGUF file from a (tiny) HF checkpoint, as llama.cpp's convert_hf_to_gguf.py would.

llama.cpp's converter is not installed here, so this writes what it writes for the families the
tests need: ``{arch}.*`` hyperparameters, the tokenizer fields copied from the bundled SmolLM2
GGUF (the tiny checkpoints use its tokenizer), and every tensor under its GGUF name, with
Llama's q/k rows permuted the way llama.cpp does (transformers un-permutes them on load).

    write_gguf(build_tiny("qwen3", tmp / "hf"), tmp / "qwen3.gguf", qtype="Q8_0")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute`` of q/k rows (rotary halves -> interleaved pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _copy_tokenizer(writer: Any, source: Path) -> None:
    from gguf import GGUFReader

    for key, field in GGUFReader(str(source)).fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[1] if len(field.types) > 1 else None
            writer.add_key_value(key, field.contents(), field.types[0], sub)


def _hparams(writer: Any, arch: str, cfg: dict[str, Any]) -> None:
    heads = cfg["num_attention_heads"]
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_key_length(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    writer.add_value_length(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    writer.add_rope_freq_base(float(cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_vocab_size(cfg["vocab_size"])


def write_gguf(hf_dir: Path, out: Path, *, qtype: str = "F32", arch: str | None = None) -> Path:
    """Write ``hf_dir``'s model as a GGUF: 2-D weights in ``qtype`` (F32, F16, Q8_0, Q4_0...), norms F32."""
    import gguf
    from safetensors.numpy import load_file

    from edgellm.host.convert.default_model import default_gguf_path

    cfg = json.loads((hf_dir / "config.json").read_text())
    arch = arch or cfg["model_type"]
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_name(f"tiny {arch}")
    _hparams(writer, arch, cfg)
    _copy_tokenizer(writer, default_gguf_path())
    names = gguf.get_tensor_name_map(next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch), 64)
    kind = gguf.GGMLQuantizationType[qtype]
    for hf_name, w in sorted(load_file(str(next(hf_dir.glob("*.safetensors")))).items()):
        base, suffix = hf_name.rsplit(".", 1)
        name = names.get_name(base)
        assert name is not None, hf_name
        w = w.astype(np.float32)
        if arch == "llama" and name.endswith(("attn_q", "attn_k")) and suffix == "weight":
            heads = cfg["num_attention_heads" if name.endswith("attn_q") else "num_key_value_heads"]
            w = _permute(w, heads)
        if w.ndim == 2 and kind != gguf.GGMLQuantizationType.F32:
            writer.add_tensor(f"{name}.{suffix}", gguf.quants.quantize(w, kind), raw_dtype=kind)
        else:
            writer.add_tensor(f"{name}.{suffix}", w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
