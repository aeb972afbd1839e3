"""Sampled decoding with speculation keeps the output distribution: the real model, ≥ 2,000 draws each way.

A fixed grounded prompt (its answer copies the passage, so drafts are verified and accepted), at
temperature 0.8: `--draws` generations of `--tokens` tokens with speculation off and on, one seed
per draw, the session's cached prompt reused (only the reply is recomputed). The token
frequencies at each position, and of the whole (position, token) table, are compared with a
chi-square homogeneity test at p = 0.001 (edgellm.common.chi2).

Usage: python bench/bench_spec_distribution.py --artifact .cache/artifacts/default [--draws 2000] [--tokens 4]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

from tqdm import tqdm

from edgellm.common.chi2 import two_sample
from edgellm.device.decoding import CALIBRATION_TEXT, Speculation, measure_forward_costs
from edgellm.device.generation import Delta, Event, GenerationJob, run_generation
from edgellm.device.sampler import SamplingConfig
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.costs import ForwardCosts
from edgellm.engine.kv_cache import KvCache
from edgellm.engine.kv_window import WindowPolicy
from edgellm.engine.mnn import MnnEngine

PROMPT = (
    "Repeat the following passage word for word.\n\nThe river runs past the old mill and under the stone "
    "bridge, where the town holds its market every week. Farmers bring bread, cheese, apples and honey."
)


def draw(
    cache: KvCache, spec: Speculation, seed: int, tokens: int, temperature: float
) -> tuple[list[int], int, int]:
    """One short sampled generation: its tokens, drafted and accepted counts."""
    out: list[int] = []

    def emit(event: Event) -> None:
        if isinstance(event, Delta):
            out.extend(event.token_ids)

    sampling = SamplingConfig(temperature=temperature, seed=seed)
    job = GenerationJob("dist", "dist", (("user", PROMPT),), tokens, sampling, speculation=spec)
    done = run_generation(cache, job, emit, threading.Event())
    return out, done.stats.draft_tokens, done.stats.accepted_draft_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.8)
    args = parser.parse_args()
    engine = MnnEngine(open_artifact(args.artifact), EngineConfig(threads=2, draft_max=8))
    engine.load()
    engine.warm_up(64)
    costs = ForwardCosts()
    measure_forward_costs(engine, costs, engine.encode(CALIBRATION_TEXT)[:64])
    cache = KvCache(engine, WindowPolicy(), costs=costs)
    samples: dict[Speculation, list[list[int]]] = {Speculation.OFF: [], Speculation.AUTO: []}
    drafted = accepted = 0
    start = time.perf_counter()
    # A progress bar: the run takes minutes idle, and printed nothing until done (issue 17).
    for seed in tqdm(range(args.draws), desc="draws (off + auto)", unit="draw", mininterval=5):
        for spec in (Speculation.OFF, Speculation.AUTO):  # alternate: drift hits both alike
            toks, d, a = draw(
                cache, spec, seed + (0 if spec == Speculation.OFF else 10**6), args.tokens, args.temperature
            )
            samples[spec].append(toks)
            drafted, accepted = drafted + d, accepted + a
    plain, spec_ = samples[Speculation.OFF], samples[Speculation.AUTO]
    report: dict[str, object] = {
        "draws": args.draws,
        "tokens": args.tokens,
        "temperature": args.temperature,
        "drafted": drafted,
        "accepted": accepted,
        "seconds": round(time.perf_counter() - start, 1),
    }
    for pos in range(args.tokens):
        r = two_sample([s[pos] for s in plain if len(s) > pos], [s[pos] for s in spec_ if len(s) > pos])
        report[f"position_{pos}"] = {
            "chi2": round(r.statistic, 1),
            "dof": r.dof,
            "critical": round(r.critical, 1),
            "passed": r.passed,
        }
    whole = two_sample([tuple(s) for s in plain], [tuple(s) for s in spec_])
    report["sequences"] = {
        "chi2": round(whole.statistic, 1),
        "dof": whole.dof,
        "critical": round(whole.critical, 1),
        "passed": whole.passed,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
