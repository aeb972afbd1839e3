"""Sliding-window KV, sessions and KV precision on the real artifact.

  python bench/bench_kv.py ppl     [--tokens 8192] [--windows 512 1024]
  python bench/bench_kv.py decode  [--window 512]
  python bench/bench_kv.py chat    [--turns 10]
  python bench/bench_kv.py memory  (one subprocess per tier x KV precision)
  python bench/bench_kv.py all     (everything; prints one JSON object)

Perplexity scores a WikiText-2 test stream in 32-token prefill chunks with all logits on, through
the daemon's own KvCache (so eviction is the product's code); a chunk sees the window plus itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from edgellm.common.paths import data_dir, default_artifact_dir
from edgellm.device.generation import GenerationJob, run_generation
from edgellm.device.sampler import SamplingConfig
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import EngineConfig
from edgellm.engine.kv_cache import FeedStats, KvCache
from edgellm.engine.kv_window import KvMethod, WindowPolicy
from edgellm.engine.mnn import MnnEngine

CHUNK = 32


def load(artifact: Path, **cfg: Any) -> MnnEngine:
    """Load the artifact with EngineConfig overrides."""
    engine = MnnEngine(open_artifact(artifact), replace(EngineConfig(), **cfg))
    engine.load()
    return engine


def stream_ids(engine: MnnEngine, n: int) -> list[int]:
    """The first n tokens of wikitext2-test (the evaluation split)."""
    text = (data_dir() / "wikitext2-test.txt").read_text()[: n * 8]
    ids = engine.encode(text)[:n]
    if len(ids) < n:
        raise SystemExit(f"only {len(ids)} tokens available")
    return ids


def log_softmax_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Negative log-likelihood of targets under [T, V] logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=1))
    nll: np.ndarray = lse - z[np.arange(len(targets)), targets]
    return nll


def cache_for(engine: MnnEngine, policy: WindowPolicy) -> KvCache:
    """A KvCache with the chat markers of this artifact."""
    return KvCache(engine, policy, engine.special_id("<|im_start|>"), engine.special_id("<|im_end|>"))


def score(
    engine: MnnEngine,
    ids: list[int],
    policy: WindowPolicy,
    on_chunk: Callable[[int, float], None] | None = None,
) -> dict[str, float]:
    """Perplexity of ids fed in CHUNK-token pieces under policy; on_chunk(tokens scored, ppl so far)."""
    engine.reset()
    cache = cache_for(engine, policy)
    cache.n_keep = max(policy.n_keep, 0) if policy.sliding else 0
    stats = FeedStats()
    nll: list[np.ndarray] = []
    start = time.perf_counter()
    for i in range(0, len(ids) - 1, CHUNK):
        piece = ids[i : min(i + CHUNK, len(ids) - 1)]
        logits = cache.feed_scored(piece, stats)
        targets = np.asarray(ids[i + 1 : i + 1 + len(piece)])
        nll.append(log_softmax_nll(logits, targets))
        if on_chunk is not None:
            so_far = np.concatenate(nll)
            on_chunk(len(so_far), float(np.exp(so_far.mean())))
    all_nll = np.concatenate(nll)
    return {
        "ppl": round(float(np.exp(all_nll.mean())), 3),
        "evicted": stats.evicted,
        "recomputed": stats.recomputed,
        "seconds": round(time.perf_counter() - start, 1),
    }


def bench_ppl(artifact: Path, tokens: int, windows: list[int], kv_quant: str) -> dict[str, Any]:
    """Full context vs sink+window (erase, reprefill) vs window without sinks."""
    engine = load(artifact, all_logits=True, attention_mode=10 if kv_quant == "int8" else 8)
    ids = stream_ids(engine, tokens)
    out: dict[str, Any] = {"tokens": tokens, "kv_quant": kv_quant}
    if tokens <= engine.context_length:
        out["full"] = score(engine, ids, WindowPolicy())
    for w in windows:
        out[f"w{w}_sink_erase"] = score(engine, ids, WindowPolicy(window=w, n_keep=4, method=KvMethod.ERASE))
        out[f"w{w}_sink_reprefill"] = score(
            engine, ids, WindowPolicy(window=w, n_keep=4, method=KvMethod.REPREFILL)
        )
        out[f"w{w}_nosink_erase"] = score(
            engine, ids, WindowPolicy(window=w, n_keep=0, method=KvMethod.ERASE)
        )
    return out


def bench_decode(artifact: Path, window: int, steps: int = 128) -> dict[str, Any]:
    """Decode speed after feeding 0.1x, 1x, 4x, 16x the window (sliding, 4 sinks, erase).

    Reports steady tok/s (from the median step time) and the mean including any eviction or
    re-base that fell into the measured steps (a re-base re-prefills the window once per
    trained-context's worth of positions).
    """
    engine = load(artifact)
    ids = stream_ids(engine, 8192)
    out: dict[str, Any] = {"window": window, "steps": steps}
    for mult in (0.1, 1, 4, 16):
        engine.reset()
        cache = cache_for(engine, WindowPolicy(window=window, n_keep=4))
        cache.n_keep = 4
        stats = FeedStats()
        n = int(window * mult)
        fed = (ids * (n // len(ids) + 1))[:n]
        token = int(np.argmax(cache.feed(fed, stats)))
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            token = int(np.argmax(cache.step(token, stats)))
            times.append(time.perf_counter() - t0)
        out[f"{mult}x"] = {
            "fed": n,
            "position": engine.position,
            "cached": len(engine.history),
            "steady_tps": round(1 / float(np.median(times)), 1),
            "mean_tps": round(steps / sum(times), 1),
            "recomputed": stats.recomputed,
        }
    base = out["0.1x"]["steady_tps"]
    out["ratio_16x_vs_0.1x"] = round(out["16x"]["steady_tps"] / base, 3)
    return out


QUESTIONS = [
    "What is the capital of France?",
    "What river runs through it?",
    "Name a famous museum there.",
    "What is in that museum?",
    "Who painted the most famous painting there?",
    "When did he live?",
    "Name another of his works.",
    "Where is that work now?",
    "Is that city far from Paris?",
    "Thanks. Summarise our conversation in one sentence.",
]


def bench_chat(artifact: Path, turns: int) -> dict[str, Any]:
    """TTFT per turn of one chat, with and without session reuse."""
    engine = load(artifact)
    out: dict[str, Any] = {}
    for mode, session in (("no_session", ""), ("session", "bench")):
        cache = cache_for(engine, WindowPolicy(window=2048, n_keep=4))
        history: list[tuple[str, str]] = [("system", "You are a helpful AI assistant.")]
        ttft: list[float] = []
        prompt_tokens: list[int] = []
        for q in QUESTIONS[:turns]:
            history.append(("user", q))
            events: list[Any] = []
            job = GenerationJob("b", None, tuple(history), 48, SamplingConfig(), session_id=session)
            done = run_generation(cache, job, events.append, threading.Event())
            reply = "".join(getattr(e, "text", "") for e in events)
            history.append(("assistant", reply))
            ttft.append(round(done.stats.ttft_ms, 1))
            prompt_tokens.append(done.stats.prompt_tokens)
        out[mode] = {
            "ttft_ms": ttft,
            "prompt_tokens": prompt_tokens,
            "turn10_vs_turn1": round(ttft[-1] / ttft[0], 2),
        }
    return out


def rss_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB."""
    fields = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def bench_memory_one(artifact: Path, tokens: int, kv_quant: str) -> dict[str, Any]:
    """RSS after loading, and after holding `tokens` tokens of KV (run in a fresh process)."""
    engine = load(artifact, attention_mode=10 if kv_quant == "int8" else 8)
    loaded, _ = rss_kib()
    ids = stream_ids(engine, tokens)
    engine.prefill(ids[:-1])
    engine.decode(ids[-1])
    rss, peak = rss_kib()
    return {
        "tokens": tokens,
        "kv_quant": kv_quant,
        "rss_loaded_mib": loaded // 1024,
        "rss_mib": rss // 1024,
        "peak_mib": peak // 1024,
        "kv_growth_mib": (rss - loaded) // 1024,
    }


def run_sub(args: list[str]) -> Any:
    """Run this script in a subprocess and parse its JSON."""
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    """CLI."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("ppl", "decode", "chat", "memory", "memory-one", "all"))
    ap.add_argument("--artifact", type=Path, default=default_artifact_dir())
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--windows", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--kv-quant", choices=("fp", "int8"), default="fp")
    ns = ap.parse_args()
    a = str(ns.artifact)
    result: Any
    if ns.what == "ppl":
        result = bench_ppl(ns.artifact, ns.tokens, ns.windows, ns.kv_quant)
    elif ns.what == "decode":
        result = bench_decode(ns.artifact, ns.window)
    elif ns.what == "chat":
        result = bench_chat(ns.artifact, ns.turns)
    elif ns.what == "memory-one":
        result = bench_memory_one(ns.artifact, ns.tokens, ns.kv_quant)
    elif ns.what == "memory":
        result = [
            run_sub(["memory-one", "--artifact", a, "--tokens", str(t), "--kv-quant", q])
            for q in ("fp", "int8")
            for t in (512, 2048)
        ]
    else:
        result = {
            "ppl_fp": run_sub(["ppl", "--artifact", a, "--tokens", str(ns.tokens)]),
            "ppl_int8kv": run_sub(
                ["ppl", "--artifact", a, "--tokens", str(ns.tokens), "--kv-quant", "int8", "--windows", "512"]
            ),
            "decode": run_sub(["decode", "--artifact", a, "--window", str(ns.window)]),
            "chat": run_sub(["chat", "--artifact", a]),
            "memory": run_sub(["memory", "--artifact", a]),
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
