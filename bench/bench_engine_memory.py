"""What an MNN engine holds, measured in a fresh child process: RSS by kind and MemAvailable.

For each artifact and each `use_mmap` setting, a child process opens the artifact as the daemon
does (`EngineConfig.for_runtime`, a private scratch dir as MNN's tmp_path), and reports
/proc/self/status (VmRSS, RssAnon, RssFile, RssShmem, VmHWM) and /proc/meminfo (MemAvailable,
Cached, Dirty) at: before load, after load, after the daemon's warm-up (256 tokens), and over a
conversation of a `--prompt`-token prefill then decode to `--positions`; the peak is VmHWM,
reset (clear_refs 5) after the warm-up. Prefill and decode tok/s are timed in the same run. The
child sets the daemon's malloc policy (common/allocator.py) first: it decides where KV buffers land.

    python bench/bench_engine_memory.py --artifact .cache/artifacts/default --reps 3

MemAvailable is machine-wide: other processes move it; compare it only within one child run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
STATUS_KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")
MEMINFO_KEYS = ("MemAvailable", "Cached", "Dirty")


def _kib(path: str, keys: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path(path).read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            out[key] = round(int(rest.split()[0]) / 1024, 1)  # kB -> MiB
    return out


def snapshot() -> dict[str, float]:
    """This process's RSS by kind and the machine's MemAvailable, in MiB."""
    return _kib("/proc/self/status", STATUS_KEYS) | _kib("/proc/meminfo", MEMINFO_KEYS)


def child(artifact_dir: str, use_mmap: bool, prompt: int, positions: int, threads: int) -> dict[str, Any]:
    """Load, warm up and run one conversation in this process; the snapshots and the speeds."""
    from dataclasses import replace

    from edgellm.common.allocator import tune_for_streaming
    from edgellm.engine.artifact import open_artifact
    from edgellm.engine.config import EngineConfig
    from edgellm.engine.mnn import MnnEngine

    tune_for_streaming()  # the daemon's malloc policy (device/rpc/server.py): it decides where KV lands
    artifact = open_artifact(Path(artifact_dir))
    out: dict[str, Any] = {"artifact_mib": round(artifact.size_bytes / MIB, 1), "use_mmap": use_mmap}
    with tempfile.TemporaryDirectory(prefix="edgellm-mnn-tmp-") as scratch:
        cfg = EngineConfig.for_runtime(artifact.runtime, threads, artifact.runtime.attention_mode)
        engine = MnnEngine(artifact, replace(cfg, use_mmap=use_mmap, scratch_dir=scratch))
        out["before_load"] = snapshot()
        engine.load()
        out["after_load"] = snapshot()
        engine.warm_up(256)
        out["after_warmup"] = snapshot()
        files = [f.stat() for f in Path(scratch).rglob("*") if f.is_file()]
        out["scratch_size_mib"] = round(sum(f.st_size for f in files) / MIB, 1)  # sparse: apparent
        out["scratch_disk_mib"] = round(sum(f.st_blocks * 512 for f in files) / MIB, 1)  # written
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        ids = [(i * 7919) % (engine.vocab_size - 8) + 4 for i in range(prompt)]
        t0, c0 = time.perf_counter(), time.process_time()
        engine.prefill(ids)
        t1, c1 = time.perf_counter(), time.process_time()
        out["after_prefill"] = snapshot()
        for i in range(positions - prompt):
            engine.decode(ids[i % prompt])
        t2, c2 = time.perf_counter(), time.process_time()
        out["after_decode"] = snapshot()
        out["prefill_tok_s"] = round(prompt / (t1 - t0), 1)
        out["decode_tok_s"] = round((positions - prompt) / (t2 - t1), 1)
        # CPU time per token (all threads): less disturbed than wall time when other jobs share the cores.
        out["prefill_cpu_ms_tok"] = round((c1 - c0) * 1000 / prompt, 2)
        out["decode_cpu_ms_tok"] = round((c2 - c1) * 1000 / (positions - prompt), 2)
        engine.close()
    return out


def run_child(artifact: str, use_mmap: bool, ns: argparse.Namespace) -> dict[str, Any]:
    """One measurement in a fresh interpreter (so nothing of an earlier load is resident)."""
    args = [sys.executable, __file__, "--child", artifact, "--prompt", str(ns.prompt)]
    args += ["--positions", str(ns.positions), "--threads", str(ns.threads)]
    args += ["--mmap"] if use_mmap else []
    done = subprocess.run(args, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first run's snapshots, the median speeds over all runs."""
    first = dict(runs[0])
    first["prefill_tok_s"] = statistics.median(r["prefill_tok_s"] for r in runs)
    first["decode_tok_s"] = statistics.median(r["decode_tok_s"] for r in runs)
    for key in ("prefill_cpu_ms_tok", "decode_cpu_ms_tok"):
        first[key] = statistics.median(r[key] for r in runs)
    first["speeds"] = [(r["prefill_tok_s"], r["decode_tok_s"]) for r in runs]
    return first


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--artifact", action="append", default=[], help="artifact dir (repeatable)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--mmap", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--prompt", type=int, default=1500)
    p.add_argument("--positions", type=int, default=2048)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=1, help="runs per setting, alternating off/on")
    p.add_argument("--mmap-modes", default="off,on", help="use_mmap settings to run: off,on | off | on")
    ns = p.parse_args()
    if ns.child:
        print(json.dumps(child(ns.child, ns.mmap, ns.prompt, ns.positions, ns.threads)))
        return
    for artifact in ns.artifact:
        modes = [m == "on" for m in ns.mmap_modes.split(",")]
        runs: dict[bool, list[dict[str, Any]]] = {m: [] for m in modes}
        for _ in range(ns.reps):
            for use_mmap in modes:
                runs[use_mmap].append(run_child(artifact, use_mmap, ns))
        for rs in runs.values():
            print(json.dumps({"artifact": artifact} | summary(rs)))


if __name__ == "__main__":
    main()
