"""``convert()``: GGUF or HF checkpoint -> verified, manifested MNN artifact, atomically."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import structlog
from tqdm import tqdm

from edgellm.common.hashing import sha256_file
from edgellm.host.convert import llmexport_adapter as adapter
from edgellm.host.convert.default_model import SourceModel, default_source, gguf_linear_widths
from edgellm.host.convert.gguf_to_hf import (
    check_rope_theta,
    default_hf_dir,
    gguf_to_hf,
    rope_theta_of,
)
from edgellm.host.convert.manifest import (
    Manifest,
    ManifestError,
    list_files,
    load_manifest,
    publish,
    verify_files,
    write_manifest,
)
from edgellm.host.convert.verify import PROMPTS, verify

log = structlog.get_logger(__name__)

# Chosen by measurement (docs/llmexport.md): INT4 block 32 for the body, INT8 for the tied
# lm_head/embedding; ppl within 4% of torch on both MNN paths at 115 MB.
DEFAULT_BITS = 4
DEFAULT_BLOCK = 32
DEFAULT_LM_BITS = 8
# Bumped whenever the default recipe changes (flags, runtime keys), so cached artifacts rebuild.
RECIPE_VERSION = 2
_TOOLS = ("torch", "transformers", "mnn", "llmexport", "gguf", "numpy")
_STEPS = ("dequantize", "export", "rope check", "verify", "manifest", "publish")


def _hf_source(hf_dir: Path) -> SourceModel:
    """Describe a local HF checkpoint; its sha256 covers config and weight files."""
    if not (hf_dir / "config.json").is_file():
        raise ValueError(f"{hf_dir} is not a Hugging Face checkpoint (no config.json)")
    digest = hashlib.sha256()
    files = sorted(hf_dir.glob("*.safetensors")) + sorted(hf_dir.glob("*.bin")) + [hf_dir / "config.json"]
    for path in files:
        digest.update(f"{path.name}:{sha256_file(path)}\n".encode())
    return SourceModel(name=hf_dir.name, path=hf_dir, sha256=digest.hexdigest())


def model_facts(hf_dir: Path) -> dict[str, Any]:
    """Architecture facts from a checkpoint's config.json."""
    cfg = json.loads((hf_dir / "config.json").read_text())
    heads = int(cfg["num_attention_heads"])
    return {
        "architecture": (cfg.get("architectures") or [cfg.get("model_type")])[0],
        "vocab_size": cfg["vocab_size"],
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_layers": cfg["num_hidden_layers"],
        "num_heads": heads,
        "num_kv_heads": cfg.get("num_key_value_heads", heads),
        "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
        "context_length": cfg.get("max_position_embeddings"),
        "rope_theta": rope_theta_of(cfg),
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
    }


def _input_widths(facts: dict[str, Any]) -> list[int]:
    """Input widths of every linear layer (q/k/v/gate/up: hidden; o: heads*dim; down: ffn)."""
    return [facts["hidden_size"], facts["num_heads"] * facts["head_dim"], facts["intermediate_size"]]


def _tool_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _TOOLS:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _quantization(settings: adapter.ExportSettings, artifact: Path) -> dict[str, Any]:
    llm_config = json.loads((artifact / "llm_config.json").read_text())
    # A tied model's embedding reads the quantized lm_head rows (llm_config "tie_embeddings").
    tied = "tie_embeddings" in llm_config
    runtime = json.loads((artifact / "config.json").read_text())
    return {
        "recipe": RECIPE_VERSION,
        "method": "rtn",
        "bits": settings.bits,
        "block": settings.block,
        "lm_head_bits": settings.lm_bits,
        "lm_head_block": settings.lm_block,
        "embed_bits": settings.lm_bits if tied else 16,
        "embed_block": settings.lm_block if tied else 0,
        "symmetric": False,
        "exporter": "llmexport",
        "runtime": {k: runtime.get(k) for k in ("memory", "precision", "dynamic_option")},
    }


def _write_token_table(hf_dir: Path, staging: Path) -> dict[str, Any]:
    """Write tokens.bin (exact bytes per id, for the device's UTF-8-safe streaming)."""
    from transformers import AutoTokenizer

    from edgellm.host.convert.token_table import stop_token_ids, token_pieces, write_for_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir))
    pieces = token_pieces(tokenizer)
    for prompt in PROMPTS:  # cheap guard: the table must reproduce the text byte for byte
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if b"".join(pieces[i] for i in ids) != prompt.encode("utf-8"):
            raise adapter.ExportFailed(f"token table does not round-trip {prompt!r}")
    table = write_for_tokenizer(tokenizer, staging)
    return {
        "token_table": table.name,
        "mnn_tokenizer": "tokenizer.mtok",
        "stop_token_ids": stop_token_ids(tokenizer, hf_dir),
        "vocab_size": len(pieces),
    }


def convert(
    model: str,
    out_dir: Path,
    bits: int = DEFAULT_BITS,
    block: int = DEFAULT_BLOCK,
    *,
    lm_bits: int = DEFAULT_LM_BITS,
    force: bool = False,
) -> Manifest:
    """Convert ``model`` ('default' or an HF dir) into a verified MNN artifact at ``out_dir``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise FileExistsError(f"{out_dir} exists (pass force=True / --force to replace it)")
    started = time.perf_counter()
    settings = adapter.ExportSettings(bits=bits, block=block, lm_bits=lm_bits, lm_block=block)
    # Validate before anything heavy so bad flags fail in milliseconds.
    if model == "default":
        source = default_source()
        adapter.validate_settings(settings, gguf_linear_widths(source.path))
    else:
        source = _hf_source(Path(model))
        adapter.validate_settings(settings, _input_widths(model_facts(source.path)))
    staging = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    workdir = Path(tempfile.mkdtemp(prefix="edgellm-convert-"))
    shutil.rmtree(staging, ignore_errors=True)
    bar = tqdm(total=len(_STEPS), desc="convert", unit="step")
    try:
        bar.set_postfix_str(_STEPS[0])
        if model == "default":
            hf_dir = gguf_to_hf(source.path, default_hf_dir(source.name, source.sha256))
        else:
            hf_dir = source.path
        facts = model_facts(hf_dir)
        adapter.validate_settings(settings, _input_widths(facts))
        bar.update()
        bar.set_postfix_str(_STEPS[1])
        adapter.export_mnn(hf_dir, staging, settings, log_dir=workdir)
        adapter.tune_runtime_config(staging)
        tokenizer_info = _write_token_table(hf_dir, staging)
        bar.update()
        bar.set_postfix_str(_STEPS[2])
        theta = check_rope_theta(hf_dir, float(facts["rope_theta"] or 10000.0))
        adapter.check_exported_rope_theta(staging, theta)
        bar.update()
        bar.set_postfix_str(_STEPS[3])
        checks = verify(staging, hf_dir)
        bar.update()
        bar.set_postfix_str(_STEPS[4])
        manifest = Manifest(
            name=source.name if model == "default" else hf_dir.name,
            files=list_files(staging),
            source={
                "name": source.name,
                "path": str(source.path),
                "package": source.package,
                "package_version": source.package_version,
                "sha256": source.sha256,
                "hf_dir": str(hf_dir),  # the fp checkpoint: `edgellm eval`'s reference
                "format": "gguf" if model == "default" else "hf",
            },
            quantization=_quantization(settings, staging),
            tokenizer=tokenizer_info,
            model=facts,
            checks=checks.to_dict(),
            tools=_tool_versions(),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            conversion_seconds=round(time.perf_counter() - started, 1),
        )
        write_manifest(staging, manifest)
        bar.update()
        bar.set_postfix_str(_STEPS[5])
        publish(staging, out_dir, force=force)
        bar.update()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        bar.close()
        shutil.rmtree(workdir, ignore_errors=True)
    log.info("convert_done", out=str(out_dir), seconds=manifest.conversion_seconds, **checks.to_dict())
    return manifest


def ensure_default_artifact(cache_dir: Path) -> Path:
    """Return ``cache_dir`` holding a valid default artifact, converting only when needed."""
    try:
        manifest = load_manifest(cache_dir)
        verify_files(cache_dir, manifest)
        if manifest.source.get("sha256") != default_source().sha256:
            raise ManifestError("artifact was built from a different default model")
        if manifest.quantization.get("recipe") != RECIPE_VERSION:
            raise ManifestError("artifact was built with an older conversion recipe")
        log.info("default_artifact_cached", path=str(cache_dir))
        return cache_dir
    except ManifestError as exc:
        log.info("default_artifact_rebuild", path=str(cache_dir), reason=str(exc))
    convert("default", cache_dir, force=True)
    return cache_dir
