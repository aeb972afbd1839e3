"""Dequantize a GGUF into a plain Hugging Face checkpoint directory (cached by hash), streamed.

transformers' own GGUF support (name map, tensor processors: Llama q/k un-permute, Gemma norm - 1)
maps the names; ``gguf`` dequantizes one memory-mapped tensor at a time and ``ShardWriter`` writes
shards as they fill, so the model is never whole in memory.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import structlog

from edgellm.host.convert.shard_writer import DEFAULT_SHARD_BYTES

log = structlog.get_logger(__name__)

EXPECTED_ROPE_THETA = 100000.0  # SmolLM2 (DESIGN.md); llmexport silently falls back to 10000
_DONE_MARKER = ".edgellm-complete"
_FP32_LIMIT_BYTES = 2 << 30


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


def output_dtype(reader: Any, requested: str = "auto") -> str:
    """The checkpoint dtype: ``requested``, or fp32 up to 2 GiB in fp32, else fp16 (bf16 if the source is)."""
    # Why fp32 for small models: a Q4_1 value d*q+m (d, m fp16, q 4-bit) needs ~15 significant
    # bits, exact in fp32 but rounded in fp16 (11) and bf16 (8); the default model stays bit-exact.
    # Above 2 GiB (~500M parameters) fp16's rounding (<= 2^-11 relative) is 2^7 finer than a
    # 4-bit step and halves disk and conversion memory; BF16 sources keep bf16's range.
    if requested != "auto":
        return requested
    tensors = reader.tensors
    if sum(int(t.n_elements) for t in tensors) * 4 <= _FP32_LIMIT_BYTES:
        return "float32"
    return "bfloat16" if any(t.tensor_type.name == "BF16" for t in tensors) else "float16"


def warn_precision(gguf_path: Path) -> str:
    """Log once what precision the GGUF's weights had; return the summary (for the manifest)."""
    from edgellm.host.convert.gguf_header import precision

    p = precision(gguf_path)
    if p.quantized:
        log.warning(
            "gguf_source_quantized",
            gguf=gguf_path.name,
            precision=p.summary(),
            note="the artifact cannot be better than this source",
        )
    return p.summary()


def _set_head_dim(reader: Any, config: Any) -> None:
    """Take head_dim from the GGUF's ``attention.key_length`` where transformers' mapping leaves it out."""
    # Why: transformers 5.17 maps key_length to head_dim for Gemma only; a Qwen3 GGUF's config then
    # gets Qwen3Config's default 128 whatever the file says (a tiny qwen3 with head_dim 16 measured
    # 128), and the q/k/v shapes no longer match the tensors.
    fields = reader.fields
    arch = str(fields["general.architecture"].contents())
    key_length = fields.get(f"{arch}.attention.key_length")
    if key_length is not None and hasattr(config, "head_dim"):
        config.head_dim = int(key_length.contents())


def _meta_model(config: Any) -> Any:
    """The HF model for ``config`` on the meta device: its state-dict names, no memory."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]


def _write_weights(reader: Any, config: Any, model: Any, out_dir: Path, dtype: str, shard_bytes: int) -> None:
    """Dequantize tensor by tensor through transformers' name map and processors into shards."""
    import numpy as np
    import torch
    from gguf.quants import dequantize
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    from edgellm.host.convert.shard_writer import ShardWriter

    arch = str(reader.fields["general.architecture"].contents())
    processor: Any = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=config.to_dict())  # type: ignore[no-untyped-call]
    names = get_gguf_hf_weights_map(model, processor)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    writer, written = ShardWriter(out_dir, shard_bytes), set()
    for tensor in reader.tensors:
        # One tensor in float32 ([out, in] or [n]); np.array copies F32 tensors out of the read-only map.
        result = processor.process(weights=dequantize(tensor.data, tensor.tensor_type), name=tensor.name)
        hf_name = names.get(result.name)
        if hf_name is None:
            continue
        weights = torch.from_numpy(np.array(result.weights)).to(getattr(torch, dtype))
        if tuple(weights.shape) != shapes[hf_name]:  # the config read from the header is wrong
            raise ValueError(
                f"{tensor.name}: shape {tuple(weights.shape)}, the config makes {shapes[hf_name]}"
            )
        writer.add(hf_name, weights)
        written.add(hf_name)
    writer.finish()
    missing = set(model.state_dict()) - written - _tied(model)
    if missing:
        raise ValueError(f"no GGUF tensor for {sorted(missing)[:5]} ({len(missing)} in all)")


def _tied(model: Any) -> set[str]:
    """State-dict names that share another's storage (lm_head.weight of a tied model)."""
    return {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()


def gguf_to_hf(
    gguf_path: Path,
    out_dir: Path,
    *,
    force: bool = False,
    dtype: str = "auto",
    expected_rope_theta: float | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> Path:
    """Write an HF checkpoint + tokenizer for ``gguf_path`` into ``out_dir``, one tensor at a time.

    Peak memory is one shard (<= 1 GiB) plus one tensor, not the model in fp32 (docs/quantization.md).
    """
    if not force and (out_dir / _DONE_MARKER).is_file():
        log.info("hf_cache_hit", path=str(out_dir))
        return out_dir
    from transformers import AutoConfig, AutoTokenizer

    tmp = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    from gguf import GGUFReader

    # One reader for every question (parsing the header costs ~2 s on a 2-core box); it
    # memory-maps the file: a tensor's pages are read when it is dequantized.
    reader = GGUFReader(str(gguf_path))
    chosen = output_dtype(reader, dtype)
    log.info(
        "gguf_dequantize_start",
        gguf=str(gguf_path),
        dtype=chosen,
        precision=warn_precision(gguf_path),
    )
    # local_files_only: a GGUF on disk needs no network (and tokenizer_config.json records it).
    where, name = str(gguf_path.parent), gguf_path.name
    config = AutoConfig.from_pretrained(where, gguf_file=name, local_files_only=True)
    config.dtype = chosen
    _set_head_dim(reader, config)
    model = _meta_model(config)
    config.architectures = [type(model).__name__]  # what save_pretrained records
    _write_weights(reader, config, model, tmp, chosen, shard_bytes)
    config.save_pretrained(str(tmp))
    model.generation_config.save_pretrained(str(tmp))
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name, local_files_only=True)
    _fix_special_tokens(tokenizer, config)
    tokenizer.save_pretrained(str(tmp))
    if expected_rope_theta is not None:
        check_rope_theta(tmp, expected_rope_theta)
    (tmp / _DONE_MARKER).write_text(str(gguf_path) + "\n")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.replace(out_dir)
    log.info("gguf_dequantize_done", path=str(out_dir))
    return out_dir
