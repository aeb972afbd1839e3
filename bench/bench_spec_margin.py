"""How far MNN's multi-token (verify) logits sit from one-token decodes: the margin greedy speculation needs.

For each prompt of the checked-in sets: a reference run (prefill, then one-token decodes, greedy:
what `--speculation off` computes) records the logits of every position. A second run feeds the
same tokens with the speculative loop's shapes, drafts of 1, 2, 4 or 8 verified in one forward,
then 0-2 one-token decodes on top of that "batched" KV, in a fixed pseudo-random pattern, and
compares every position's logits with the reference's. Per position it reports the spread
max(d) - min(d) of d = logits - reference over the vocabulary: when a row's top-1 minus top-2 gap
exceeds the spread, its argmax is the reference's argmax. The gate (`Engine.logit_tolerance`,
docs/speculation.md) must sit above the largest spread seen, with room to spare.

Usage: python bench/bench_spec_margin.py --artifact .cache/artifacts/default [--tokens 96] [--out F]
On emulated ARM (the engine's own aarch64 kernels, fp16 with `low`): python -m scripts.arm64_env
python -- -m bench.bench_spec_margin --artifact .cache/artifacts/default --tokens 24 --prompts 2
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_spec import SETS, load_set
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.mnn import MnnEngine


def spread(a: np.ndarray, ref: np.ndarray) -> float:
    """max - min of (a - ref): the most any pairwise logit gap can move between the two."""
    d = a.astype(np.float64) - ref.astype(np.float64)
    return float(d.max() - d.min())


def gap(x: np.ndarray) -> float:
    """Top-1 minus top-2 logit."""
    top = np.partition(x, -2)[-2:]
    return float(top[1] - top[0])


def measure(engine: MnnEngine, ids: list[int], tokens: int, rng: random.Random) -> dict[str, Any]:
    """Reference logits, then the same tokens fed in the speculative loop's shapes."""
    engine.reset()
    ref = [engine.prefill(ids)]
    out: list[int] = []
    for _ in range(tokens):
        t = int(np.argmax(ref[-1]))
        if t in engine.stop_ids:
            break
        out.append(t)
        ref.append(engine.decode(t))
    # out[i] is chosen from ref[i]; feeding out[i] gives ref[i + 1].
    engine.reset()
    engine.prefill(ids)
    batched: list[float] = []
    dirty: list[float] = []
    flips = 0
    i = 0
    while i < len(out) - 1:
        k = min(rng.choice((1, 2, 4, 8)), len(out) - 1 - i)
        rows = engine.verify(out[i : i + k + 1])
        for j in range(k + 1):
            if i + j + 1 < len(ref):
                batched.append(spread(rows[j], ref[i + j + 1]))
                flips += int(np.argmax(rows[j]) != np.argmax(ref[i + j + 1]))
        i += k + 1
        for _ in range(rng.choice((0, 1, 2))):
            if i >= len(out):
                break
            row = engine.decode(out[i])
            if i + 1 < len(ref):
                dirty.append(spread(row, ref[i + 1]))
                flips += int(np.argmax(row) != np.argmax(ref[i + 1]))
            i += 1
    return {"batched": batched, "dirty": dirty, "gaps": [gap(r) for r in ref[: len(out)]], "flips": flips}


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--prompts", type=int, default=0, help="first N prompts of each set (0 = all)")
    parser.add_argument(
        "--precision",
        choices=("low", "normal", "high"),
        default=None,
        help="MNN precision (default: the artifact's)",
    )
    args = parser.parse_args()
    config = EngineConfig(threads=args.threads, draft_max=8)
    if args.precision:
        config = replace(config, precision=args.precision)
    engine = MnnEngine(open_artifact(args.artifact), config)
    engine.load()
    engine.warm_up(64)
    rng = random.Random(17)
    per_set: dict[str, dict[str, list[float]]] = {}
    flips = 0
    for name in SETS:
        acc: dict[str, list[float]] = {"batched": [], "dirty": [], "gaps": []}
        for p in load_set(name)[: args.prompts or None]:
            ids = engine.encode(engine.apply_chat_template([("user", p["prompt"])]))
            m = measure(engine, ids, args.tokens, rng)
            flips += m["flips"]
            for key in acc:
                acc[key].extend(m[key])
            print(
                json.dumps(
                    {
                        "set": name,
                        "max_batched": round(max(m["batched"], default=0), 3),
                        "max_dirty": round(max(m["dirty"], default=0), 3),
                        "flips": m["flips"],
                    }
                ),
                flush=True,
            )
        per_set[name] = acc
    summary: dict[str, Any] = {"argmax_flips": flips}
    for name, acc in per_set.items():
        for key in ("batched", "dirty"):
            xs = acc[key]
            summary[f"{name}_{key}"] = {
                "n": len(xs),
                "p50": round(pct(xs, 50), 3),
                "p99": round(pct(xs, 99), 3),
                "max": round(max(xs, default=float("nan")), 3),
            }
        gaps = acc["gaps"]
        summary[f"{name}_gap_below"] = {
            str(t): round(float(np.mean(np.array(gaps) < t)), 3) for t in (0.5, 1.0, 1.5, 2.0, 3.0)
        }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "per_set": per_set}))


if __name__ == "__main__":
    main()
