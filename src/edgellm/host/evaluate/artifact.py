"""`edgellm eval`: the real artifact's perplexity, plus top-1/KL against its fp source when present."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgellm.common.artifact_files import read_manifest
from edgellm.common.errors import EdgeError
from edgellm.common.progress import Progress, quiet
from edgellm.host.builder.host_source import host_hf_dir
from edgellm.host.evaluate.evaluate import EVAL_FILE, EvalConfig, artifact_bytes, evaluate, take_tokens
from edgellm.host.evaluate.scorers import MnnScorer, Scorer, TorchScorer
from edgellm.host.quantize.families import torch_attention


def reference_dir(artifact: Path) -> tuple[Path | None, str]:
    """The fp checkpoint the artifact was built from (host_source.HOST_SOURCE) if it is on this host.

    Returns ``(path, "")`` or ``(None, why not)`` so callers can say why top-1/KL are missing.
    """
    try:
        manifest, _ = read_manifest(artifact)
    except (EdgeError, OSError) as err:
        return None, f"the artifact's manifest cannot be read ({err})"
    path = host_hf_dir(artifact, manifest)
    if not (path / "config.json").is_file():
        return None, f"its fp source {path} is not on this host"
    return path, ""


def evaluate_artifact(
    artifact: Path,
    config: EvalConfig,
    reference: Path | None = None,
    kv_modes: tuple[int, ...] = (),
    progress: Progress = quiet,
) -> dict[str, Any]:
    """Perplexity of the MNN artifact (and fp reference); optionally the KV-cache precision delta."""
    if not (artifact / "config.json").is_file():
        raise FileNotFoundError(f"{artifact} is not an MNN artifact (no config.json)")
    progress(0.0, "load: artifact")
    mnn = MnnScorer(artifact)
    scorers: dict[str, Scorer] = {"mnn": mnn}
    if reference is not None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(reference))
        ids = take_tokens(tok(config.text(), add_special_tokens=False)["input_ids"], config.tokens)
        model = AutoModelForCausalLM.from_pretrained(str(reference), **torch_attention(reference))
        scorers = {"fp": TorchScorer(model), **scorers}
    else:
        ids = take_tokens(mnn.tokenize(config.text()), config.tokens)
    results = evaluate(
        ids,
        scorers,
        config,
        "fp" if reference else None,
        lambda f, m: progress(0.05 + 0.6 * f, f"evaluate: {m}"),
    )
    out: dict[str, Any] = {
        "artifact": str(artifact),
        "size_bytes": artifact_bytes(artifact),
        "text": config.text_file.name if config.text_file else EVAL_FILE,
        "tokens": config.tokens,
        "context": config.context,
        "stride": config.stride,
        "reference": str(reference) if reference else None,
        "results": results,
    }
    if kv_modes:
        out["kv_cache"] = kv_cache_delta(artifact, ids[:1024], config, kv_modes, progress)
    progress(1.0, "done: evaluated")
    return out


def kv_cache_delta(
    artifact: Path, ids: list[int], config: EvalConfig, modes: tuple[int, ...], progress: Progress = quiet
) -> dict[str, Any]:
    """Perplexity with the KV cache in each MNN ``attention_mode`` (8 fp, 9 INT8 K, 10 INT8 K+V).

    Every token is decoded one at a time, so each scored token attends to keys/values read back
    from the (possibly quantized) cache.
    """
    import numpy as np

    from edgellm.host.evaluate.metrics import Accumulator, log_softmax
    from edgellm.host.evaluate.windows import windows

    wins = windows(len(ids), config.context, config.context)  # non-overlapping windows
    out: dict[str, Any] = {}
    for k, mode in enumerate(modes):
        scorer = MnnScorer(artifact, {"attention_mode": mode})
        acc = Accumulator()
        for win in wins:
            chunk = ids[win.begin : win.end]
            logits = scorer.decode(chunk)  # [T, V]
            acc.add(log_softmax(logits[:-1]), np.asarray(chunk[1:]), None)
        out[str(mode)] = acc.result()
        progress(0.65 + 0.35 * (k + 1) / len(modes), f"kv: attention_mode {mode}")
    return out
