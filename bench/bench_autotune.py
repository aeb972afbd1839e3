"""The load-time autotune's pick against a manual sweep of the same thread counts.

First `tune_threads` exactly as the daemon runs it at load (short trials); then, for each
candidate, a fresh load, warm-up and `--reps` decodes of `--tokens` tokens (median tok/s).
The pick passes when its swept decode is within 5% of the sweep's best.

Usage: python bench/bench_autotune.py --artifact .cache/artifacts/default [--reps 3] [--tokens 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from edgellm.device.core.autotune import TUNE_TEXT, candidate_threads, measure, tune_threads
from edgellm.device.core.tuner import usable_cpus
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.mnn import MnnEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    art = open_artifact(args.artifact)
    candidates = candidate_threads(usable_cpus())
    tuning = tune_threads(MnnEngine, art, EngineConfig(), candidates)
    sweep: dict[int, float] = {}
    for threads in candidates:
        engine = MnnEngine(art, EngineConfig(threads=threads))
        engine.load()
        prompt = (engine.encode(TUNE_TEXT) * 4)[:64]
        engine.warm_up(256)
        sweep[threads] = statistics.median(measure(engine, prompt, args.tokens)[0] for _ in range(args.reps))
        engine.close()
    best = max(sweep, key=lambda t: sweep[t])
    ratio = sweep[tuning.threads] / sweep[best]
    print(
        json.dumps(
            {
                "candidates": list(candidates),
                "autotune_trials": {t.threads: round(t.decode_tokens_per_second, 1) for t in tuning.trials},
                "autotune_pick": tuning.threads,
                "autotune_seconds": round(tuning.seconds, 1),
                "sweep_decode_tps": {t: round(v, 1) for t, v in sweep.items()},
                "sweep_best": best,
                "pick_vs_best": round(ratio, 3),
                "within_5_percent": ratio >= 0.95,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
