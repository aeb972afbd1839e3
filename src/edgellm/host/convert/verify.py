"""The conversion gate: a real MNN artifact against torch (export fidelity, perplexity, next token).

Protocol: the first EVAL_TOKENS tokens of the evaluation text scored as ONE window, through both
MNN paths (one prefill with all logits, and one token per forward as generation runs).

- **Fidelity** (the export is right; independent of bits): each MNN path against the torch model
  holding the artifact's own integers (`fidelity.py`: mean KL, KL by position bucket, top-1
  agreement where torch is confident). It replaces next-token agreement on 8 prompts, which on
  flat distributions was decided by near-ties.
- **Quality**: MNN perplexity against torch fp (at most MAX_PPL_RATIO above it), and a guard
  against degenerate logits (perplexity near 1). The ratio is judged only for a model that
  predicts better than a uniform guess over its vocabulary: an untrained (random-weight)
  checkpoint has no quality to lose, and its ratio measures noise (tiny Gemma-3 at INT4: torch's
  own quantized model is 1.11x its fp perplexity of 1.1e10, while MNN sits 0.2% from it).
- The greedy next token of each of PROMPTS against torch fp is recorded as information.

`edgellm eval` uses another protocol (windows of 512 every 256 over 2,048 tokens), so its
perplexities are higher: fewer tokens of context per prediction.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from edgellm.common.allocator import release_free_memory
from edgellm.common.manifest import Checks, Fidelity
from edgellm.common.mnn_llm import MnnLlm, host_threads, rows
from edgellm.common.paths import data_dir
from edgellm.host.convert.fidelity import CHUNK, Limits, Tally, describe_positions, failures
from edgellm.host.convert.reference import (
    ROWS,
    ChunkedLogits,
    HeadLogits,
    WholeLogits,
    chunks,
    final_hidden,
    model_head,
)
from edgellm.host.convert.reference import reference_logits as reference_logits_of
from edgellm.host.evaluate.evaluate import EVAL_FILE
from edgellm.host.evaluate.scorers import decode_chunks
from edgellm.host.quantize.apply import Materialize

log = structlog.get_logger(__name__)

EVAL_TOKENS = 1024  # > 512, so the last position bucket (where RoPE defects grow) is filled
MAX_PPL_RATIO = 1.05  # MNN perplexity may be at most 5% above torch fp32
GATE = Limits()  # the fidelity limits (fidelity.py; measured in docs/quantization.md)
PATHS = ("prefill", "decode")  # the two MNN code paths, both gated

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
    return perplexity_of(WholeLogits(logits), ids)


def perplexity_of(logits: ChunkedLogits, ids: list[int]) -> float:
    """``perplexity`` of logits handed out by rows (reference.py), never whole."""
    nll = Nll(ids)
    for start, part in chunks(logits):
        nll.add(start, part)
    return nll.perplexity()


class Nll:
    """Negative log-likelihood of each next token of ``ids``, filled by chunks of positions."""

    def __init__(self, ids: list[int]) -> None:
        self.target = np.asarray(ids[1:])  # position t predicts ids[t + 1]
        self.nll = np.full(len(self.target), np.nan)

    def add(self, start: int, rows: np.ndarray) -> None:
        """Logits [C, V] of positions ``start`` .. ``start + C`` (the last position predicts nothing)."""
        # Why CHUNK rows at a time: float64 temporaries of the whole [T, V] (a copy and its exp) held
        # 1.2 GB at T=1024, V=49,152 while the torch models and MNN were loaded.
        for a in range(start, min(start + len(rows), len(self.target)), CHUNK):
            b = min(a + CHUNK, start + len(rows), len(self.target))
            x = rows[a - start : b - start].astype(np.float64)  # [C, V]
            if not np.isfinite(x).all():
                raise ConversionCheckFailed("non-finite logits")
            top = x.max(axis=-1, keepdims=True)
            logz = np.log(np.exp(x - top).sum(axis=-1)) + top[:, 0]
            self.nll[a:b] = logz - x[np.arange(len(x)), self.target[a:b]]

    def perplexity(self) -> float:
        """exp(mean NLL) over every target (each must have been added)."""
        if np.isnan(self.nll).any():
            raise ValueError(
                f"{int(np.isnan(self.nll).sum())} of {len(self.nll)} positions were never scored"
            )
        return float(math.exp(self.nll.mean()))


@dataclass
class PathScore:
    """One MNN path's perplexity and fidelity against the reference, filled by chunks of positions."""

    nll: Nll
    tally: Tally

    @classmethod
    def of(cls, ids: list[int]) -> PathScore:
        """Empty figures for the positions of ``ids``."""
        return cls(Nll(ids), Tally(len(ids)))

    def add(self, start: int, ref_rows: np.ndarray, rows: np.ndarray) -> None:
        """Positions ``start`` .. ``start + C``: the reference's and this path's logits [C, V]."""
        self.nll.add(start, rows)
        self.tally.add(start, ref_rows, rows)


@dataclass(frozen=True)
class MnnScores:
    """Each MNN code path's figures against the reference, and greedy next tokens for PROMPTS."""

    prefill: PathScore
    decode: PathScore
    reference: Nll  # the reference's own next-token NLL (its perplexity)
    next_tokens: list[int]
    prefill_seconds: float  # MNN's forwards only
    decode_seconds: float


def mnn_scores(
    artifact_dir: Path, ids: list[int], prompts_ids: list[list[int]], ref: ChunkedLogits
) -> MnnScores:
    """Score ``ids`` with one prefill (all logits) and token by token (decode path) against ``ref``.

    Neither path's [T, V] logits are copied or held whole: the prefill's are read in place from
    MNN's output buffer, the decode path's come ROWS positions at a time, and each chunk is scored
    against the same rows of the reference as soon as it exists.
    """
    release_free_memory()  # what the build freed before (pipeline._free) makes room for MNN's model
    # all_logits makes forward() return [T, V] instead of only the last position; it must be
    # set before load() (toggling it later re-clones the module).
    model = MnnLlm.open(artifact_dir / "config.json", {"thread_num": host_threads(), "all_logits": True})
    prefill, decode, reference = PathScore.of(ids), PathScore.of(ids), Nll(ids)
    start = time.perf_counter()
    forwarded: list[float] = []

    def score_prefill(logits: np.ndarray) -> None:
        forwarded.append(time.perf_counter() - start)
        view = rows(logits)  # [T, V], MNN's own buffer
        for a, ref_rows in chunks(ref):
            reference.add(a, ref_rows)
            prefill.add(a, ref_rows, view[a : a + len(ref_rows)])

    model.forward_read(ids, score_prefill)
    # Decode path: one token per forward, as generation runs. With "memory": "low" MNN
    # quantizes activations for multi-token prefill, so the two paths differ measurably.
    start, busy = time.perf_counter(), 0.0
    for a, logits in decode_chunks(model, ids, ROWS):
        step = time.perf_counter()
        decode.add(a, ref.rows(a, a + len(logits)), logits)
        busy += time.perf_counter() - step
    decode_seconds = time.perf_counter() - start - busy
    nexts = []
    for prompt in prompts_ids:
        model.reset()
        nexts.append(int(rows(model.forward(prompt))[-1].argmax()))
    model.reset()
    return MnnScores(prefill, decode, reference, nexts, forwarded[0], decode_seconds)


@dataclass(frozen=True)
class FpReference:
    """What the gate needs of the torch fp model: its perplexity and greedy next tokens.

    Taken before quantizing, so that a build can quantize the fp model in place (no second copy).
    """

    ids: list[int]
    prompts_ids: list[list[int]]
    torch_ppl: float
    next_tokens: list[int]


def fp_reference(
    model: Any, tokenizer: Any, n_tokens: int = EVAL_TOKENS, materialize: Materialize | None = None
) -> FpReference:
    """Score the fp ``model`` once for the gate (perplexity of the evaluation tokens, next tokens).

    Every sequence goes through each decoder layer in one visit (``materialize``: a streamed model's
    layer loader), and the logits are formed by rows: no [T, V] array (reference.py).
    """
    import torch

    ids = eval_token_ids(tokenizer, n_tokens)
    prompts_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    hidden = final_hidden(model, [ids, *prompts_ids], materialize)
    head = model_head(model)
    ppl = perplexity_of(HeadLogits(hidden[0], head, int(model.config.vocab_size)), ids)
    with torch.inference_mode():
        nexts = [int(head(h[-1:]).argmax()) for h in hidden[1:]]
    return FpReference(ids, prompts_ids, ppl, nexts)


def verify(
    artifact_dir: Path,
    model: Any,
    tokenizer: Any,
    *,
    reference: Any = None,
    fp: FpReference | None = None,
    reference_logits: ChunkedLogits | None = None,
    n_tokens: int = EVAL_TOKENS,
    max_ratio: float = MAX_PPL_RATIO,
    limits: Limits = GATE,
) -> Checks:
    """Measure the artifact against torch; ConversionCheckFailed when out of tolerance.

    ``model`` is the fp model (perplexity, next tokens) unless ``fp`` was taken from it already;
    ``reference`` the torch model holding the artifact's integers (fidelity). Without
    ``reference`` fidelity is measured against ``model``, so it then includes the quantization
    error too. ``reference_logits`` are the reference's logits of ``fp.ids``, taken already (a build
    that frees its torch model before the export passes them: reference.py, by rows).
    """
    fp = fp or fp_reference(model, tokenizer, n_tokens)
    ids, prompts_ids, torch_ppl, torch_next = fp.ids, fp.prompts_ids, fp.torch_ppl, fp.next_tokens
    ref = reference_logits or reference_logits_of(model if reference is None else reference, ids)
    scores = mnn_scores(artifact_dir, ids, prompts_ids, ref)
    quant_ppl = scores.reference.perplexity()
    log.info("torch_reference_done", ppl=round(torch_ppl, 4), quant_ppl=round(quant_ppl, 4))
    ppl = {path: getattr(scores, path).nll.perplexity() for path in PATHS}
    fid = {path: getattr(scores, path).tally.fidelity() for path in PATHS}
    mnn_ppl = max(ppl.values())
    agree = sum(a == b for a, b in zip(torch_next, scores.next_tokens, strict=True))
    result = Checks(
        eval_file=EVAL_FILE,
        eval_tokens=len(ids),
        torch_ppl=round(torch_ppl, 4),
        mnn_ppl=round(mnn_ppl, 4),
        mnn_ppl_prefill=round(ppl["prefill"], 4),
        mnn_ppl_decode=round(ppl["decode"], 4),
        ppl_ratio=round(mnn_ppl / torch_ppl, 4),
        agreement=agree / len(PROMPTS),
        agree_count=agree,
        prompts=len(PROMPTS),
        prefill_tokens_per_second=round(len(ids) / scores.prefill_seconds, 1),
        decode_tokens_per_second=round(len(ids) / scores.decode_seconds, 1),
        torch_quant_ppl=round(quant_ppl, 4),
        fidelity_prefill=_rounded(fid["prefill"]),
        fidelity_decode=_rounded(fid["decode"]),
        max_kl=limits.max_kl,
        min_top1_clear=limits.min_top1_clear,
    )
    log.info("verify_done", **asdict(result))
    check_quality(ppl, torch_ppl, max_ratio, vocab=ref.vocab)
    check_fidelity(fid, limits)
    return result


def check_quality(
    ppl: dict[str, float], torch_ppl: float, max_ratio: float, vocab: int | None = None
) -> None:
    """Refuse MNN perplexity above ``max_ratio`` × torch fp, or degenerate (near 1).

    With ``vocab`` given and torch fp no better than uniform over it (perplexity ≥ ``vocab``: an
    untrained checkpoint), the ratio is not judged; fidelity alone decides (module docstring).
    """
    worst, low = max(ppl.values()), min(ppl.values())
    untrained = vocab is not None and torch_ppl >= vocab
    if untrained:
        log.warning(
            "quality_not_judged",
            reason="torch perplexity >= vocabulary size: untrained weights",
            torch_ppl=torch_ppl,
            vocab=vocab,
            ratio=round(worst / torch_ppl, 4),
        )
    too_high = worst / torch_ppl > max_ratio and not untrained
    # ppl near 1.0 means degenerate logits (seen with an invalid block size), not quality.
    if not math.isfinite(worst) or too_high or low < 1.5:
        raise ConversionCheckFailed(
            f"perplexity check failed: mnn prefill {ppl['prefill']:.3f} / decode "
            f"{ppl['decode']:.3f} vs torch {torch_ppl:.3f} "
            f"(ratio {worst / torch_ppl:.3f}, limit {max_ratio})"
        )


def check_fidelity(fid: dict[str, Fidelity], limits: Limits) -> None:
    """Refuse an MNN path whose distributions sit beyond ``limits`` from the torch reference."""
    for path, f in fid.items():
        bad = failures(f, limits)
        if bad:
            raise ConversionCheckFailed(
                f"fidelity check failed on the MNN {path} path: {'; '.join(bad)} ({describe_positions(f)})"
            )


def _rounded(f: Fidelity) -> Fidelity:
    """``f`` with 3 significant digits: the manifest records a measurement, not float noise."""
    return Fidelity(
        kl_mean=_sig(f.kl_mean),
        kl_p99=_sig(f.kl_p99),
        kl_by_position={k: _sig(v) for k, v in f.kl_by_position.items()},
        top1_clear=None if f.top1_clear is None else round(f.top1_clear, 4),
        n_clear=f.n_clear,
        delta=f.delta,
    )


def _sig(x: float) -> float:
    return float(f"{x:.3g}")
