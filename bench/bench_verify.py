"""What verifying drafts costs on MNN: verify lengths vs a decode step, and what `all_logits` costs a prefill.

Two engines of the same artifact, used alternately: one loaded as the daemon loads it for drafting
(`speculative_type` lookahead: only decode-mode forwards return every row), one with `all_logits`
(every forward, prefills included, computes the LM head for every position). Medians of `--reps`.

Usage: python bench/bench_verify.py --artifact .cache/artifacts/default [--reps 15] [--prefill 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from edgellm.device.decoding import CALIBRATION_TEXT
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig, verify_lengths
from edgellm.engine.mnn import MnnEngine


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def verify_and_rewind(engine: MnnEngine, token: int, n: int) -> None:
    """A fully rejected draft of n - 1: the verify and its rewind."""
    engine.verify([token] * n)
    engine.rewind(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    art = open_artifact(args.artifact)
    spec = MnnEngine(art, EngineConfig(threads=args.threads, draft_max=8))
    full = MnnEngine(art, EngineConfig(threads=args.threads, all_logits=True))
    for e in (spec, full):
        e.load()
        e.warm_up(args.prefill)
    ids = (spec.encode(CALIBRATION_TEXT) * 8)[: args.prefill]
    prefill: dict[str, list[float]] = {"last_row": [], "all_logits": []}
    forward: dict[int, list[float]] = {n: [] for n in [1, *verify_lengths(8)]}
    for _ in range(args.reps):
        for name, e in (("last_row", spec), ("all_logits", full)):
            e.reset()
            prefill[name].append(timed(partial(e.prefill, ids)))
        token = int(np.argmax(spec.decode(ids[-1])))
        for n in forward:
            if n == 1:
                forward[n].append(timed(partial(spec.decode, token)))
                spec.rewind(1)
            else:
                forward[n].append(timed(partial(verify_and_rewind, spec, token, n)))
    med = {k: statistics.median(v) * 1000 for k, v in prefill.items()}
    fwd = {n: statistics.median(v) * 1000 for n, v in forward.items()}
    print(
        json.dumps(
            {
                "prefill_ms": {k: round(v, 1) for k, v in med.items()},
                "all_logits_prefill_ratio": round(med["all_logits"] / med["last_row"], 2),
                "forward_ms": {n: round(v, 2) for n, v in fwd.items()},
                "forward_vs_decode": {n: round(v / fwd[1], 2) for n, v in fwd.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
