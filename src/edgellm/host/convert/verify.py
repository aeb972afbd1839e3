"""The conversion gate: a real MNN artifact against the fp torch model (next token + perplexity).

Protocol: the first EVAL_TOKENS tokens of the evaluation text scored as ONE window, through both
MNN paths (one prefill with all logits, and one token per forward as generation runs), and the
greedy next token of each of PROMPTS. `edgellm eval` uses another protocol (windows of 512 every
256 over 2,048 tokens), so its perplexities are higher: fewer tokens of context per prediction.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from edgellm.common.manifest import Checks
from edgellm.common.mnn_llm import MnnLlm, host_threads, rows
from edgellm.common.paths import data_dir
from edgellm.host.evaluate.evaluate import EVAL_FILE
from edgellm.host.evaluate.scorers import decode_each

log = structlog.get_logger(__name__)

EVAL_TOKENS = 1024
MAX_PPL_RATIO = 1.05  # MNN perplexity may be at most 5% above torch fp32
MIN_AGREEMENT = 0.75  # share of PROMPTS whose greedy next token must match torch

# Fixed prompts for next-token agreement: facts, code, chat and plain prose.
PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "1, 2, 3, 4, 5,",
    "def fibonacci(n):\n    if n < 2:\n        return",
    "The quick brown fox jumps over the lazy",
    "<|im_start|>user\nWhat is the largest planet in the solar system?<|im_end|>\n<|im_start|>assistant\n",
    "Water boils at a temperature of 100 degrees",
    "Once upon a time, there was a little girl who",
    "In machine learning, a neural network is",
)


class ConversionCheckFailed(RuntimeError):
    """The converted artifact disagrees with the torch model beyond tolerance."""


def eval_token_ids(tokenizer: Any, n_tokens: int = EVAL_TOKENS) -> list[int]:
    """First ``n_tokens`` token ids of the WikiText-2 test split."""
    path = data_dir() / EVAL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"evaluation text {path} missing; set EDGELLM_DATA_DIR")
    text = path.read_text(encoding="utf-8")[: n_tokens * 16]  # plenty of characters
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < n_tokens:
        raise ValueError(f"{path} yields only {len(ids)} tokens, need {n_tokens}")
    return ids[:n_tokens]


def perplexity(logits: np.ndarray, ids: list[int]) -> float:
    """Perplexity of ``ids[1:]`` under per-position ``logits`` [T, V] (position t predicts t+1)."""
    x = logits[:-1].astype(np.float64)  # [T-1, V]
    if not np.isfinite(x).all():
        raise ConversionCheckFailed("non-finite logits")
    target = np.asarray(ids[1:])
    top = x.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(x - top).sum(axis=-1)) + top[:, 0]
    nll = logz - x[np.arange(len(target)), target]
    return float(math.exp(nll.mean()))


def torch_reference(model: Any, ids: list[int], prompts_ids: list[list[int]]) -> tuple[float, list[int]]:
    """Torch perplexity on ``ids`` (one window) and greedy next token for each prompt."""
    import torch

    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0]  # [T, V]
        ppl = perplexity(logits.numpy(), ids)
        nexts = [int(model(torch.tensor([p])).logits[0, -1].argmax()) for p in prompts_ids]
    return ppl, nexts


@dataclass(frozen=True)
class MnnScores:
    """Perplexity through both MNN code paths, and greedy next tokens for PROMPTS."""

    ppl_prefill: float
    ppl_decode: float
    next_tokens: list[int]
    prefill_seconds: float
    decode_seconds: float


def mnn_scores(artifact_dir: Path, ids: list[int], prompts_ids: list[list[int]]) -> MnnScores:
    """Score ``ids`` with one prefill (all logits) and token by token (decode path)."""
    # all_logits makes forward() return [T, V] instead of only the last position; it must be
    # set before load() (toggling it later re-clones the module).
    model = MnnLlm.open(artifact_dir / "config.json", {"thread_num": host_threads(), "all_logits": True})
    start = time.perf_counter()
    ppl_prefill = perplexity(rows(model.forward(ids)), ids)
    prefill_seconds = time.perf_counter() - start
    # Decode path: one token per forward, as generation runs. With "memory": "low" MNN
    # quantizes activations for multi-token prefill, so the two paths differ measurably.
    start = time.perf_counter()
    ppl_decode = perplexity(decode_each(model, ids), ids)
    decode_seconds = time.perf_counter() - start
    nexts = []
    for prompt in prompts_ids:
        model.reset()
        nexts.append(int(rows(model.forward(prompt))[-1].argmax()))
    model.reset()
    return MnnScores(ppl_prefill, ppl_decode, nexts, prefill_seconds, decode_seconds)


def verify(
    artifact_dir: Path,
    model: Any,
    tokenizer: Any,
    *,
    n_tokens: int = EVAL_TOKENS,
    max_ratio: float = MAX_PPL_RATIO,
    min_agreement: float = MIN_AGREEMENT,
) -> Checks:
    """Measure the artifact against the fp torch ``model``; ConversionCheckFailed when out of tolerance."""
    ids = eval_token_ids(tokenizer, n_tokens)
    prompts_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    torch_ppl, torch_next = torch_reference(model, ids, prompts_ids)
    log.info("torch_reference_done", ppl=round(torch_ppl, 4))
    scores = mnn_scores(artifact_dir, ids, prompts_ids)
    mnn_ppl = max(scores.ppl_prefill, scores.ppl_decode)
    mnn_next = scores.next_tokens
    agree = sum(a == b for a, b in zip(torch_next, mnn_next, strict=True))
    result = Checks(
        eval_file=EVAL_FILE,
        eval_tokens=len(ids),
        torch_ppl=round(torch_ppl, 4),
        mnn_ppl=round(mnn_ppl, 4),
        mnn_ppl_prefill=round(scores.ppl_prefill, 4),
        mnn_ppl_decode=round(scores.ppl_decode, 4),
        ppl_ratio=round(mnn_ppl / torch_ppl, 4),
        agreement=agree / len(PROMPTS),
        agree_count=agree,
        prompts=len(PROMPTS),
        prefill_tokens_per_second=round(len(ids) / scores.prefill_seconds, 1),
        decode_tokens_per_second=round(len(ids) / scores.decode_seconds, 1),
    )
    log.info("verify_done", **vars(result))
    low = min(scores.ppl_prefill, scores.ppl_decode)
    if not math.isfinite(mnn_ppl) or mnn_ppl / torch_ppl > max_ratio or low < 1.5:
        # ppl near 1.0 means degenerate logits (seen with an invalid block size), not quality.
        raise ConversionCheckFailed(
            f"perplexity check failed: mnn prefill {scores.ppl_prefill:.3f} / decode "
            f"{scores.ppl_decode:.3f} vs torch {torch_ppl:.3f} "
            f"(ratio {mnn_ppl / torch_ppl:.3f}, limit {max_ratio})"
        )
    if result.agreement < min_agreement:
        raise ConversionCheckFailed(
            f"next-token agreement {agree}/{len(PROMPTS)} below {min_agreement:.0%}: "
            f"torch {torch_next} vs mnn {mnn_next}"
        )
    return result
