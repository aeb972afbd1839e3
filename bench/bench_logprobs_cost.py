"""What logprobs cost on the device: decode tok/s with them off / on / on with 5 alternatives, and a
256-token prompt scored (echo: every position's logits) vs prefilled plainly. Interleaved per round.

Runs the daemon's own generation path (`run_generation` over the engine and KvCache, speculation
off so all three decode alike) on the real artifact, in this process.

Usage: python -m bench.bench_logprobs_cost --artifact .cache/artifacts/default [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from edgellm.device.decoding import Speculation
from edgellm.device.generation import GenerationJob, run_generation
from edgellm.device.sampler import SamplingConfig
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.kv_cache import KvCache
from edgellm.engine.kv_window import WindowPolicy
from edgellm.engine.mnn import MnnEngine

CHAT = (("user", "Write a long story about a lighthouse keeper who finds a message in a bottle."),)
TEXT = "The history of the city begins with a small harbour on the river, where traders met. " * 20
DECODE: dict[str, dict[str, Any]] = {
    "off": {},
    "on": {"logprobs": True},
    "on_top5": {"logprobs": True, "top_logprobs": 5},
}
SCORE: dict[str, dict[str, Any]] = {"plain": {}, "echo": {"prompt_logprobs": True, "top_logprobs": 1}}


def main() -> None:
    """Time each variant `--rounds` times, interleaved; print the medians."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ns = ap.parse_args()
    artifact = open_artifact(ns.artifact)
    engine = MnnEngine(artifact, EngineConfig.for_runtime(artifact.runtime, 2, 8))
    engine.load()
    engine.warm_up(256)
    cache = KvCache(engine, WindowPolicy())
    # End-of-turn banned so every request decodes exactly 64 tokens.
    sampling = SamplingConfig(logit_bias={t: -100.0 for t in engine.stop_ids})
    ids = tuple(engine.encode(TEXT)[:256])
    tps: dict[str, list[float]] = {k: [] for k in DECODE}
    ms: dict[str, list[float]] = {k: [] for k in SCORE}
    for _ in range(ns.rounds):
        for name, extra in DECODE.items():
            job = GenerationJob("d", None, CHAT, 64, sampling, speculation=Speculation.OFF, **extra)
            done = run_generation(cache, job, lambda _: None, threading.Event())
            tps[name].append(done.stats.decode_tokens_per_second)
        for name, extra in SCORE.items():
            job = GenerationJob("s", None, (), 1, SamplingConfig(), prompt_token_ids=ids, **extra)
            start = time.perf_counter()
            run_generation(cache, job, lambda _: None, threading.Event())
            ms[name].append((time.perf_counter() - start) * 1000)
    print(
        json.dumps(
            {
                "decode_tps_median": {k: round(statistics.median(v), 1) for k, v in tps.items()},
                "score_256_tokens_ms_median": {k: round(statistics.median(v), 1) for k, v in ms.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
