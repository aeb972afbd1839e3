"""The evaluation protocol: same documents, both paths, per-token NLLs cached, paired intervals.

A model is scored once per (model identity, slice, path, windows); its per-token NLLs are cached
under ``<cache>/eval`` so adding a method to a comparison never rescores the others. Reports
give each model's perplexity per path with a 95% interval, and paired differences against fp and
against a baseline (RTN) with intervals (``bootstrap.PairedBootstrap``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgellm.common.errors import InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.common.paths import cache_dir
from edgellm.host.evaluate.bootstrap import BLOCK, PairedBootstrap, block_ids
from edgellm.host.evaluate.corpus import Slice
from edgellm.host.evaluate.runners import PATHS, MnnRunner, Runner, TorchRunner, score_document
from edgellm.host.quantize.families import torch_attention

log = get_logger(__name__)
Progress = Callable[[float, str], None]


def _quiet(_f: float, _m: str) -> None:
    return None


@dataclass(frozen=True)
class Protocol:
    """What is scored and how."""

    slice: Slice = field(default_factory=Slice)
    paths: tuple[str, ...] = PATHS
    context: int = 512  # prefill window
    stride: int = 256
    block: int = BLOCK  # bootstrap unit, scored tokens
    # MNN threads; None = the daemon's 2. Scores are bit-identical at 1 and 2 threads (measured on
    # rtn-b64, both paths), so the cache ignores it and a busy machine can score models in parallel.
    threads: int | None = None

    def __post_init__(self) -> None:
        # Why: with stride == context each window's first token has no context inside it and goes
        # unscored, so prefill would score fewer tokens than decode and the paired bootstrap would
        # refuse the scores only after every model had been run (minutes each).
        if "prefill" in self.paths and not 0 < self.stride < self.context:
            raise InvalidArgument(
                f"prefill windows need 0 < stride < context so every token is scored once, "
                f"got stride {self.stride}, context {self.context}: lower --stride"
            )

    def describe(self) -> dict[str, Any]:
        """JSON-ready description."""
        return {
            **self.slice.describe(),
            "paths": list(self.paths),
            "context": self.context,
            "stride": self.stride,
            "bootstrap_block": self.block,
            "runtime": "the daemon's: the manifest runtime, 2 threads, no sliding window",
        }


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


@dataclass(frozen=True)
class Model:
    """A model to score: an MNN artifact (``mnn``) or a Hugging Face checkpoint in fp32 (``hf``)."""

    name: str
    kind: str
    path: Path

    def identity(self) -> str:
        """Content hash of what decides the model's outputs."""
        if self.kind == "mnn":
            return _digest(*((self.path / f).read_bytes() for f in ("manifest.json", "config.json")))
        weights = sorted(self.path.glob("*.safetensors"))
        stats = [f"{w.name}:{w.stat().st_size}:{w.stat().st_mtime_ns}".encode() for w in weights]
        attention = json.dumps(torch_attention(self.path)).encode()  # sdpa vs eager differ (Gemma-2's cap)
        return _digest((self.path / "config.json").read_bytes(), attention, *stats)

    def open(self, threads: int | None = None) -> Runner:
        """Load it."""
        if self.kind == "mnn":
            return MnnRunner(self.path, {"threads": threads} if threads else None)
        import torch

        if threads:
            torch.set_num_threads(threads)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            str(self.path), dtype=torch.float32, **torch_attention(self.path)
        )
        return TorchRunner(model)


def _cache_file(model: Model, docs: list[list[int]], path: str, protocol: Protocol) -> Path:
    windows = f"{protocol.context}/{protocol.stride}" if path == "prefill" else "stream"
    key = _digest(
        model.identity().encode(),
        np.concatenate([np.asarray(d, dtype=np.int64) for d in docs]).tobytes(),
        json.dumps([len(d) for d in docs]).encode(),
        f"{path}:{windows}:v1".encode(),
    )
    return cache_dir() / "eval" / f"{model.name}-{path}-{key[:16]}.npy"


def score_model(
    model: Model, docs: list[list[int]], protocol: Protocol, progress: Progress = _quiet
) -> dict[str, np.ndarray]:
    """Per-token NLLs of ``model`` on ``docs`` for every path of the protocol (cached)."""
    out: dict[str, np.ndarray] = {}
    runner: Runner | None = None
    total = sum(len(d) - 1 for d in docs) * len(protocol.paths)
    done = 0
    for path in protocol.paths:
        file = _cache_file(model, docs, path, protocol)
        if file.is_file():
            out[path] = np.load(file)
            done += len(out[path])
            continue
        runner = runner or model.open(protocol.threads)
        parts = []
        for k, doc in enumerate(docs):
            parts.append(score_document(runner, doc, path, protocol.context, protocol.stride))
            done += len(doc) - 1
            progress(done / total, f"{model.name} {path}: document {k + 1}/{len(docs)}")
        out[path] = np.concatenate(parts)
        file.parent.mkdir(parents=True, exist_ok=True)
        np.save(file, out[path])
        log.info("eval_scored", model=model.name, path=path, tokens=len(out[path]), cache=str(file))
    if runner is not None:
        runner.close()
    return out


def model_row(boot: PairedBootstrap, name: str, fp: str | None, baseline: str | None) -> dict[str, Any]:
    """One model's perplexity and its paired deltas against fp and the baseline, with intervals."""
    row: dict[str, Any] = {"ppl": boot.ppl(name).to_json()}
    vs_fp = fp if fp and name != fp else None
    if vs_fp is not None:
        row["delta_vs_fp"] = boot.delta(name, vs_fp).to_json()
    if baseline and name != baseline:
        row["delta_vs_baseline"] = boot.delta(name, baseline).to_json()
        if vs_fp is not None:
            row["removed_of_baseline_increase"] = boot.removed(name, baseline, vs_fp).to_json()
    return row


def evaluate_models(
    models: list[Model],
    docs: list[list[int]],
    protocol: Protocol,
    fp: str | None = None,
    baseline: str | None = None,
    progress: Progress = _quiet,
    pairs: tuple[tuple[str, str], ...] = (),
) -> dict[str, Any]:
    """Score every model; perplexities and paired deltas (vs fp, vs baseline, ``pairs``) with intervals."""
    nll: dict[str, dict[str, np.ndarray]] = {}
    for i, m in enumerate(models):

        def part(f: float, msg: str, i: int = i) -> None:
            progress((i + f) / len(models), msg)

        nll[m.name] = score_model(m, docs, protocol, part)
    units = block_ids([len(d) - 1 for d in docs], protocol.block)
    result: dict[str, Any] = {
        "protocol": protocol.describe(),
        "documents": len(docs),
        "scored_tokens": len(units),
        "models": {m.name: {} for m in models},
    }
    for path in protocol.paths:
        boot = PairedBootstrap({k: v[path] for k, v in nll.items()}, units)
        for m in models:
            result["models"][m.name][path] = model_row(boot, m.name, fp, baseline)
        for a, b in pairs:
            if a in nll and b in nll:
                result.setdefault("pairs", {}).setdefault(f"{a} - {b}", {})[path] = boot.delta(a, b).to_json()
    result["fp"], result["baseline"] = fp, baseline
    return result
