"""What competes with MNN's threads while the daemon decodes (issue 28, item 6).

Starts a real `edgellm daemon` (plaintext loopback, governor off) at each thread count and has
this process stream greedy generations from it, as a client on the same machine would. Around
each generation it reads the CPU time of every daemon thread (`/proc/PID/task/*/stat`, grouped by
thread name: MNN's pool threads carry the process name, `engine-worker` runs the forward on the
Python side, gRPC's threads are `grpc_*`, asyncio's loop is the main thread) and this client's
own CPU time. Per token it reports the CPU each group used and the client's; the engine-side decode
rate from GenerateStats; and the same with the client at nice 19 (the scheduler then gives MNN's
threads the cores first, as a client on another machine would leave them).

    python -m bench.bench_thread_contention --artifact .cache/artifacts/default [--threads 1,2] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.scale_serve import DaemonSide, daemon_process

TICK = os.sysconf("SC_CLK_TCK")
PROMPT = (("user", "Write a long story about a lighthouse keeper and the sea."),)


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds per thread (utime + stime) of process PID."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended between listing and reading
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def split_busiest(per_thread: dict[int, float], engine_threads: int) -> dict[str, float]:
    """The ENGINE_THREADS busiest threads (MNN's: the forward's caller and its pool) and the rest."""
    # Why by rank, not by name: Python's threads (engine-worker, asyncio, gRPC's) all carry the
    # process name in /proc on this Python, so the name cannot tell MNN's threads apart.
    ranked = sorted(per_thread.values(), reverse=True)
    return {"engine_threads": sum(ranked[:engine_threads]), "all_other_threads": sum(ranked[engine_threads:])}


def own_cpu() -> float:
    """This process's CPU seconds, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(side: Any, pid: int, tokens: int, threads: int) -> dict[str, Any]:
    """One greedy generation of TOKENS; CPU per token per group, engine-side decode tok/s."""
    before, client0 = thread_cpu(pid), own_cpu()
    stats, _ = side.generate(list(PROMPT), tokens, [])
    after, client1 = thread_cpu(pid), own_cpu()
    n = max(1, int(stats.completion_tokens))
    used = split_busiest({t: after[t] - before.get(t, 0.0) for t in after}, threads)
    per = {k: round(v / n * 1000, 3) for k, v in used.items()}
    return {
        "decode_tps": round(stats.decode_tokens_per_second, 2),
        "tokens": n,
        "daemon_cpu_ms_per_token": per,
        "client_cpu_ms_per_token": round((client1 - client0) / n * 1000, 3),
    }


def runs_summary(threads: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians of RUNS and the runs."""
    return {
        "threads": threads,
        "decode_tps_median": statistics.median(r["decode_tps"] for r in runs),
        "client_cpu_ms_per_token_median": statistics.median(r["client_cpu_ms_per_token"] for r in runs),
        "runs": runs,
    }


def niced_client(target: str, pid: int, threads: int, ns: argparse.Namespace) -> list[dict[str, Any]]:
    """The same runs from a child client at nice 19 (the daemon stays at nice 0)."""
    argv = ["nice", "-n", "19", sys.executable, "-m", "bench.bench_thread_contention", "--artifact"]
    argv += [
        str(ns.artifact),
        "--reps",
        str(ns.reps),
        "--tokens",
        str(ns.tokens),
        "--threads",
        str(threads),
        "--client-of",
        f"{target},{pid}",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return list(json.loads(out))


def measure(ns: argparse.Namespace, threads: int) -> dict[str, Any]:
    """At THREADS: REPS runs from this client, then REPS from a niced child client."""
    with daemon_process(ns.artifact, threads) as (side, pid):
        side.generate(list(PROMPT), 16, [])  # warm the session path
        near = [one_run(side, pid, ns.tokens, threads) for _ in range(ns.reps)]
        niced = niced_client(side.target, pid, threads, ns)
    return {"client_nice_0": runs_summary(threads, near), "client_nice_19": runs_summary(threads, niced)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--artifact", type=Path, required=True)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--client-of", help="(internal) TARGET,PID: only run the client side")
    ns = p.parse_args()
    if ns.client_of:
        target, pid = ns.client_of.split(",")
        side = DaemonSide(target)
        threads = int(ns.threads)
        print(json.dumps([one_run(side, int(pid), ns.tokens, threads) for _ in range(ns.reps)]))
        return
    results = [measure(ns, int(t)) for t in ns.threads.split(",")]
    print(json.dumps({"load_average": os.getloadavg(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
