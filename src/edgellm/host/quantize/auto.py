"""`--plan auto --ppl-budget X`: the smallest plan whose measured perplexity stays within budget.

1. Quantize every linear once at the base precision (INT4, GPTQ by default) and once at INT8
   (RTN, same block: near lossless, and MNN's runtime needs blocks; see ``plan.preset``).
2. Sensitivity: for each unit (a layer's q/k/v, o, gate/up, down) put only that unit at INT4 and
   measure KL(fp ‖ model) on held-out text; rank units by KL saved per byte spent on INT8.
3. Candidates: the top-k units at INT8, the rest INT4. Bisect k on torch perplexity (held-out
   WikiText-2 *valid* text, so the test split only ever reports). Every candidate tried is
   printed/logged with its size and perplexity.
4. Export the winner with the same integer weights and measure the real MNN artifact on the
   test split; if that misses the budget, step up to the next candidate.
The result is a plain plan (JSON rules) derived from the integer weights actually exported (each
INT8 unit's rule carries the block it was quantized with), so re-applying the saved plan with
``--plan FILE`` rebuilds the same integers: bit-identical weights for RTN; GPTQ/AWQ recompute the
INT4 layers with the INT8 units already in place, so theirs can differ slightly.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import structlog
import torch

from edgellm.common.progress import Progress, quiet, scaled
from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.builder.pipeline import Measure, Quantized, build_artifact
from edgellm.host.evaluate.evaluate import EvalConfig, evaluate
from edgellm.host.evaluate.metrics import log_softmax
from edgellm.host.evaluate.scorers import Scorer, TorchScorer
from edgellm.host.quantize.adapter import adapter_for
from edgellm.host.quantize.apply import quantize_model
from edgellm.host.quantize.device import device
from edgellm.host.quantize.grid import QuantizedWeight, block_size, rtn_quantize
from edgellm.host.quantize.plan import Calibration, LayerRule, QuantPlan

log = structlog.get_logger(__name__)
HELD_OUT_TOKENS = 1024
SENSITIVITY_TOKENS = 256  # short: 120 probes must stay cheap on a CPU


@dataclass(frozen=True)
class Candidate:
    """One plan tried during the search."""

    k: int
    size_bytes: int
    ppl: float


@dataclass(frozen=True)
class _Base:
    """What every budget's search starts from: base and INT8 weights, units, sensitivities."""

    qmodel: Any
    w4: dict[str, QuantizedWeight]
    w8: dict[str, QuantizedWeight]
    units: list[list[str]]
    extra: list[int]  # bytes each unit costs at INT8 over the base
    kl: list[float]  # KL(fp || fp with only this unit at the base precision)
    seconds: float

    @property
    def names(self) -> list[str]:
        """Every linear of the layers (not lm_head)."""
        return [n for n in self.w4 if n != "lm_head"]


def _held_out_ids(loaded: LoadedModel, n: int = HELD_OUT_TOKENS) -> list[int]:
    """Tokens from the end of the valid split (calibration draws random windows from all of it)."""
    from edgellm.host.quantize.calibration import calibration_path

    text = calibration_path(Calibration()).read_text(encoding="utf-8")[-n * 16 :]
    ids: list[int] = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[-n:]


def _set(model: torch.nn.Module, weights: dict[str, QuantizedWeight], names: list[str]) -> None:
    with torch.no_grad():
        for name in names:
            lin = model.get_submodule(name)
            assert isinstance(lin, torch.nn.Linear)
            lin.weight.copy_(weights[name].dequantize())


def _base_state(loaded: LoadedModel, base: QuantPlan, progress: Progress) -> tuple[_Base, bool]:
    """Base quantization and per-unit sensitivity, memoised on the loaded model (one per base plan).

    Why: they do not depend on the budget, and they are most of the search's time (the GPTQ
    pass), so several budgets on one loaded model (the benchmark) pay for them once.
    """
    state, reused = loaded.memo(("auto-base", base), lambda: _compute_base(loaded, base, progress))
    if reused:
        progress(0.6, "search: reusing the base quantization and sensitivities of this model")
    return state, reused


def _compute_base(loaded: LoadedModel, base: QuantPlan, progress: Progress) -> _Base:
    start = time.perf_counter()
    fp = loaded.model
    adapter = adapter_for(fp)
    progress(0.0, f"quantize: base INT{base.bits} {base.method} b{base.block}")
    qmodel = copy.deepcopy(fp)
    on = device(loaded.device)
    w4, _ = quantize_model(
        qmodel, base, loaded.calibration(base), scaled(progress, 0.0, 0.35, "quantize: "), on
    )
    names = [n for n in w4 if n != "lm_head"]
    w8 = {n: rtn_quantize(fp.get_submodule(n).weight, 8, base.block) for n in names}
    units = [
        [f"{prefix}{short}" for short in group]
        for prefix in sorted({n.rsplit(".", 2)[0] + "." for n in names}, key=_layer_index)
        for group in adapter.sequential
    ]
    extra = [sum(w8[n].n_bytes() - w4[n].n_bytes() for n in unit) for unit in units]
    kl = _sensitivities(fp, w4, units, _held_out_ids(loaded), scaled(progress, 0.35, 0.25))
    return _Base(qmodel, w4, w8, units, extra, kl, time.perf_counter() - start)


def _layer_index(prefix: str) -> int:
    return int(prefix.rstrip(".").rsplit(".", 1)[1])


def _sensitivities(
    fp: Any, w4: dict[str, QuantizedWeight], units: list[list[str]], ids: list[int], progress: Progress
) -> list[float]:
    """KL(fp || fp with only one unit at the base precision), per unit, on held-out tokens."""
    x = torch.tensor([ids[:SENSITIVITY_TOKENS]])
    with torch.inference_mode():
        ref = log_softmax(fp(x).logits[0].numpy())
    probe = copy.deepcopy(fp)
    originals = {n: probe.get_submodule(n).weight.detach().clone() for unit in units for n in unit}
    kl = []
    for u, unit in enumerate(units):
        _set(probe, w4, unit)
        with torch.inference_mode():
            lp = log_softmax(probe(x).logits[0].numpy())
        kl.append(float((np.exp(ref) * (ref - lp)).sum(-1).mean()))
        with torch.no_grad():
            for n in unit:
                probe.get_submodule(n).weight.copy_(originals[n])
        progress((u + 1) / len(units), f"sensitivity: unit {u + 1}/{len(units)}")
    return kl


class _Search:
    """Candidates "the top-k units at INT8, the rest at the base precision", sized and scored."""

    def __init__(self, loaded: LoadedModel, st: _Base, progress: Progress) -> None:
        self.st = st
        self.progress = progress
        self.ids = _held_out_ids(loaded)
        # Rank units by KL saved per byte spent on INT8.
        self.ranking = sorted(range(len(st.units)), key=lambda u: -st.kl[u] / max(st.extra[u], 1))
        self.order = list(self.ranking)
        self.base_bytes = sum(st.w4[n].n_bytes() for n in st.names) + st.w4["lm_head"].n_bytes()
        self.tried: dict[int, Candidate] = {}
        self.fp_ppl = _ppl(TorchScorer(loaded.model), self.ids)

    def weights(self, k: int) -> dict[str, QuantizedWeight]:
        """Every linear's weights for candidate k (lm_head stays at the base plan's)."""
        chosen = {n for u in self.order[:k] for n in self.st.units[u]}
        picked = {n: (self.st.w8[n] if n in chosen else self.st.w4[n]) for n in self.st.names}
        return picked | {"lm_head": self.st.w4["lm_head"]}

    def candidate(self, k: int) -> Candidate:
        """Candidate k's size and torch perplexity on the held-out text (memoised)."""
        if k not in self.tried:
            _set(self.st.qmodel, self.weights(k), self.st.names)
            size = self.base_bytes + sum(self.st.extra[u] for u in self.order[:k])
            self.tried[k] = c = Candidate(k, size, _ppl(TorchScorer(self.st.qmodel), self.ids))
            log.info("auto_candidate", k=k, size_mb=round(size / 1e6, 2), ppl=round(c.ppl, 3))
            self.progress(
                0.6 + 0.02 * len(self.tried), f"search: k={k} size {size / 1e6:.1f} MB ppl {c.ppl:.3f}"
            )
        return self.tried[k]

    def smallest_within(self, target: float) -> int:
        """Bisect for the fewest INT8 units whose perplexity is <= target (all of them if none is)."""
        lo, hi = 0, len(self.st.units)
        if self.candidate(hi).ppl > target:
            return hi  # even all-INT8 misses: take it and report
        while lo < hi:
            mid = (lo + hi) // 2
            if self.candidate(mid).ppl <= target:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def fill(self, size_budget: int) -> int:
        """Greedy by KL per byte, skipping a unit that no longer fits but trying the cheaper ones after it."""
        spent, picked = self.base_bytes, list[int]()
        for u in self.order:
            if spent + self.st.extra[u] <= size_budget:
                picked.append(u)
                spent += self.st.extra[u]
        self.order = picked + [u for u in self.order if u not in picked]
        self.candidate(len(picked))
        return len(picked)


def search_plan(
    loaded: LoadedModel,
    base: QuantPlan,
    budget: float,
    output: Path,
    *,
    size_budget: int | None = None,
    verify: bool = False,
    progress: Progress = quiet,
) -> dict[str, Any]:
    """Find, export and measure the smallest plan within ``budget`` (relative perplexity increase).

    ``base`` is the plan every unit starts from (e.g. INT4 GPTQ b64 with its calibration). With
    ``size_budget`` (bytes of linear weights) the search instead takes the most INT8 units that
    fit, e.g. to compare with a fixed recipe at equal size. ``verify`` also runs the conversion
    gate on each exported candidate (convert/verify.py: raises if the artifact is not faithful).
    """
    if not 0 < budget < 1:
        raise ValueError(f"ppl budget must be a fraction in (0, 1), e.g. 0.03; got {budget}")
    start = time.perf_counter()
    st, reused = _base_state(loaded, base, progress)
    search = _Search(loaded, st, progress)
    target = search.fp_ppl * (1 + budget)
    if size_budget is not None:
        k = search.fill(size_budget)
        target = float("inf")  # the size decides; the MNN check below then always accepts
    else:
        k = search.smallest_within(target)
    while True:
        weights = search.weights(k)
        _set(st.qmodel, weights, st.names)
        quantized = Quantized(st.qmodel, weights, [], time.perf_counter() - start)
        built = build_artifact(
            loaded,
            plan_for(base, weights),
            output,
            measure=Measure(verify=verify),
            quantized=quantized,
            progress=scaled(progress, 0.7, 0.3),
        )
        result = built.summary()
        res = result["evaluation"]["results"]
        if (
            size_budget is not None
            or res["mnn"]["ppl"] <= res["fp"]["ppl"] * (1 + budget)
            or k >= len(st.units)
        ):
            break
        k = min(len(st.units), max(k + 1, int(k * 1.25)))  # the MNN artifact missed: step up
        search.candidate(k)
    result["auto"] = {
        "budget": budget,
        "held_out_fp_ppl": search.fp_ppl,
        "held_out": f"last {len(search.ids)} tokens of wikitext2-valid.txt, windows of 512 (torch)",
        "target_ppl": target,
        "units_int8": k,
        "base_seconds": round(st.seconds, 1),  # base quantization + sensitivity
        "base_reused": reused,  # True: taken from an earlier search on this loaded model
        "candidates": [vars(c) for c in sorted(search.tried.values(), key=lambda c: c.k)],
        "sensitivity_top": [{"unit": _unit_label(st.units[u]), "kl": st.kl[u]} for u in search.ranking[:10]],
    }
    return result


def _unit_label(unit: list[str]) -> str:
    return unit[0].rsplit(".", 1)[0] + "." + "+".join(n.rsplit(".", 1)[1] for n in unit)


def _ppl(scorer: Scorer, ids: list[int]) -> float:
    cfg = EvalConfig(tokens=len(ids), context=512, stride=512)
    return evaluate(ids, {"m": scorer}, cfg)["m"]["ppl"]


def plan_for(base: QuantPlan, weights: dict[str, QuantizedWeight]) -> QuantPlan:
    """The plan that reproduces ``weights``: a rule for each linear whose bits or block differ from ``base``.

    Read from the integers actually exported, so the recorded plan cannot drift from the applied
    one (INT8 units keep the block they were quantized with, not per channel).
    """
    rules = []
    for name, q in weights.items():
        if name == "lm_head":
            continue
        spec = base.spec_for(name)
        ic = q.codes.shape[1]
        if q.bits != spec.bits or q.block != block_size(ic, spec.block):
            rules.append(LayerRule(name, bits=q.bits, block=q.plan_block, method="rtn"))
    lm = weights["lm_head"]
    plan = replace(base, name="auto", rules=tuple(rules), lm_head_bits=lm.bits, lm_head_block=lm.plan_block)
    for name, q in weights.items():
        got = plan.spec_for(name) if name != "lm_head" else None
        if got is not None and (got.bits, block_size(q.codes.shape[1], got.block)) != (q.bits, q.block):
            raise AssertionError(f"plan_for: the plan would not reproduce {name}")
    return plan
