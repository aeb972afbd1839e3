"""Measure MNN decode/prefill speed at 1 and 2 threads, oversubscribed, and the cost of a reload.

These figures fit the virtual phone's thread curve (decode/prefill serial fractions and the
oversubscription efficiency). Usage: python bench/measure_threads.py MNN_CONFIG_JSON [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from edgellm.common.mnn_llm import MnnLlm, rows
from edgellm.device.governor.actuators import set_process_affinity


def pin_all_threads(cpus: set[int]) -> set[int]:
    """Set the affinity of every thread of this process; return what the kernel reports back."""
    return set(set_process_affinity(cpus))


def measure(config: Path, threads: int, pin: set[int] | None, prompt: int, decode: int) -> dict[str, float]:
    """Load with `threads`, optionally pin, then time a prefill and a greedy decode."""
    # Why through MnnLlm: it applies the settings as a dict before load(). An earlier version
    # passed json.dumps(...), which pymnn 3.6.1 ignores, so thread_num stayed at config.json's.
    t0 = time.perf_counter()
    llm = MnnLlm.open(config, {"thread_num": threads, "backend_type": "cpu", "precision": "low"})
    load_s = time.perf_counter() - t0
    full = set(os.sched_getaffinity(0))
    if pin is not None:
        pin_all_threads(pin)
    ids = llm.encode("The history of the city " * 40)[:prompt]
    best_p, best_d = 0.0, 0.0
    for _ in range(2):
        llm.reset()
        t = time.perf_counter()
        logits = rows(llm.forward(ids))[-1]
        best_p = max(best_p, len(ids) / (time.perf_counter() - t))
        tok = int(np.argmax(logits))
        t = time.perf_counter()
        for _ in range(decode):
            tok = int(np.argmax(rows(llm.forward([tok]))[-1]))
        best_d = max(best_d, decode / (time.perf_counter() - t))
    pin_all_threads(full)
    del llm
    return {
        "threads": threads,
        "cores": len(pin) if pin else len(full),
        "load_s": load_s,
        "prefill_tokens_per_second": best_p,
        "decode_tokens_per_second": best_d,
    }


def serial_fraction(s2: float) -> float:
    """Amdahl serial share from the 2-thread speed-up: S(2) = 1 / (s + (1 - s) / 2)."""
    return max(0.0, min(1.0, 2.0 / s2 - 1.0))


def main() -> int:
    """Run the three configurations and print the fitted curve."""
    ap = argparse.ArgumentParser()
    ap.add_argument("config", type=Path)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    one = measure(ns.config, 1, {cpus[0]}, ns.prompt, ns.decode)
    two = measure(ns.config, 2, None, ns.prompt, ns.decode)
    over = measure(ns.config, 2, {cpus[0]}, ns.prompt, ns.decode)
    fit = {
        "decode_serial_fraction": serial_fraction(
            two["decode_tokens_per_second"] / one["decode_tokens_per_second"]
        ),
        "prefill_serial_fraction": serial_fraction(
            two["prefill_tokens_per_second"] / one["prefill_tokens_per_second"]
        ),
        "oversubscription_efficiency": over["decode_tokens_per_second"] / one["decode_tokens_per_second"],
        "oversubscription_efficiency_prefill": over["prefill_tokens_per_second"]
        / one["prefill_tokens_per_second"],
        "reload_s": two["load_s"],
    }
    out = {"runs": [one, two, over], "fit": fit}
    sys.stdout.write(json.dumps(out, indent=None if ns.json else 2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
