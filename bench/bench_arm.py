"""Quality on ARM: perplexity of the same artifacts on x86 and on emulated aarch64 (fp16 and fp32).

  python -m bench.bench_arm all [--tokens 1024] [--jobs 2] [--out .cache/bench/arm_quality.json]
  python -m bench.bench_arm one --artifact DIR --precision low --mode chunked [--attention 8]

`all` runs every case of CASES once in a fresh process, on this host (x86) or on the emulated
aarch64 CPU of scripts/arm64_env.py (`-cpu max`: fp16 arithmetic, dot product), resumes from
--out, and prints a Markdown table. `one` is the worker: it scores the first --tokens tokens of
wikitext2-test through the daemon's own engine and KV cache (bench/bench_kv.py's scorer, 32-token
prefill chunks, all logits) and prints one JSON line. Emulation speed is no phone figure; only
the perplexities and the probe are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_kv import load, log_softmax_nll, score, stream_ids
from edgellm.engine.kv_window import KvMethod, WindowPolicy

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = {
    "default": REPO / ".cache" / "artifacts" / "default",
    "gptq-b64": REPO / ".cache" / "artifacts" / "gptq-b64",
    # Why a third: RTN needs no calibration, so it builds in minutes where GPTQ took hours on the
    # loaded build machine; `edgellm quantize --model default --method rtn --bits 4 --block 64 --plan int4`.
    "rtn-b64": REPO / ".cache" / "artifacts" / "rtn-b64",
}
SECOND = ("gptq-b64", "rtn-b64")
MNN_CPU_LINE = re.compile(r"The device supports: .*")
PROBE_TEXT = "The capital of France is Paris, and the river that runs through it is the Seine."


@dataclass(frozen=True)
class Case:
    """One measurement: where, which artifact, which MNN precision, how it is fed."""

    arch: str  # "x86_64" (this host) or "aarch64" (emulated)
    artifact: str  # key of ARTIFACTS
    precision: str  # MNN precision: low = fp16 where the CPU has it (ARMv8.2), high = fp32
    mode: str  # chunked (32-token prefills) | single (one forward) | window (4 sinks + 256, erase)
    attention: int = 8  # MNN attention_mode: 8 fp KV, 9 INT8 K, 10 INT8 K and V
    tokens: int = 1024  # first N wikitext2-test tokens
    window: int = 256  # window mode: 4 sinks + this many tokens, evicted by erase

    @property
    def name(self) -> str:
        """A stable key for the results file (token count and window only where they differ)."""
        key = f"{self.arch}/{self.artifact}/{self.precision}/{self.mode}/a{self.attention}"
        if self.tokens != 1024:
            key += f"/t{self.tokens}"
        if self.mode == "window" and self.window != 256:
            key += f"/w{self.window}"
        return key


# Why two lengths: emulated MNN runs ~50-150x slower than x86, so a 1,024-token ARM case takes
# an hour or more of one core on the shared 2-core build machine. The 128-token set (4 chunks of 32,
# a 64-token window behind 4 sinks) came first; the 1,024-token set is the length (the
# window keeps 256 behind 4 sinks and evicts ~760). Every ARM case has an x86 twin of the same
# tokens, and fp16 vs fp32 is a paired comparison on the same tokens.
SHORT = 128


def arm_cases(tokens: int, window: int) -> list[Case]:
    """The ARM set at one length: both precisions of each artifact, the window, the INT8 KV modes."""
    return [
        *(
            Case("aarch64", art, prec, "chunked", tokens=tokens)
            for art in ("default", *SECOND)
            for prec in ("low", "high")
        ),
        Case("aarch64", "default", "low", "window", tokens=tokens, window=window),
        Case("aarch64", "default", "low", "chunked", 10, tokens=tokens),
        Case("aarch64", "default", "low", "single", 10, tokens=tokens),
        Case("aarch64", "default", "low", "chunked", 9, tokens=tokens),
    ]


ARM_CASES = [*arm_cases(1024, 256), *arm_cases(SHORT, 64)]
CASES = [
    *ARM_CASES,
    *(Case("x86_64", c.artifact, c.precision, c.mode, c.attention, c.tokens, c.window) for c in ARM_CASES),
]


def ppl_single(artifact: Path, ids: list[int], **cfg: Any) -> float:
    """Perplexity of ids scored by one forward over all of them (no state carried between forwards)."""
    engine = load(artifact, all_logits=True, **cfg)
    logits = engine.prefill_all(ids[:-1])  # [T-1, V]
    nll = log_softmax_nll(logits, np.asarray(ids[1:]))
    return round(float(np.exp(nll.mean())), 3)


def probe(artifact: Path, threads: int) -> float:
    """Largest |logit| difference between precision low and high on one prompt (0 when no fp16 ran)."""
    rows = []
    for precision in ("low", "high"):
        engine = load(artifact, precision=precision, all_logits=True, threads=threads)
        rows.append(engine.prefill_all(engine.encode(PROBE_TEXT)))
        engine.close()
    return round(float(np.abs(rows[0] - rows[1]).max()), 4)


PROGRESS = re.compile(r"^\[progress\] tokens=(\d+) ppl=([0-9.]+)")


def progress(start: float) -> Callable[[int, float], None]:
    """A per-chunk reporter on stderr: a case cut off by a deadline still says how far it got."""

    def report(tokens: int, ppl: float) -> None:
        seconds = time.perf_counter() - start
        print(f"[progress] tokens={tokens} ppl={ppl:.3f} seconds={seconds:.0f}", file=sys.stderr, flush=True)

    return report


def one(ns: argparse.Namespace) -> dict[str, Any]:
    """Worker: measure one case in this interpreter."""
    cfg: dict[str, Any] = {"precision": ns.precision, "attention_mode": ns.attention, "threads": ns.threads}
    start = time.perf_counter()
    out: dict[str, Any] = {"machine": platform.machine(), "python": platform.python_version()}
    if ns.mode == "single":
        engine = load(ns.artifact, **cfg)
        ids = stream_ids(engine, ns.tokens)
        engine.close()
        out["ppl"] = ppl_single(ns.artifact, ids, **cfg)
    else:
        engine = load(ns.artifact, all_logits=True, **cfg)
        ids = stream_ids(engine, ns.tokens)
        sliding = WindowPolicy(window=ns.window, n_keep=4, method=KvMethod.ERASE)
        policy = sliding if ns.mode == "window" else WindowPolicy()
        result = score(engine, ids, policy, on_chunk=progress(start))
        out["ppl"], out["evicted"] = result["ppl"], result["evicted"]
        engine.close()
    if ns.probe:
        out["low_vs_high_max_abs_logit_diff"] = probe(ns.artifact, ns.threads)
    out["seconds"] = round(time.perf_counter() - start, 1)  # includes emulation: not a speed figure
    return out


def command(case: Case, threads: int) -> tuple[list[str], dict[str, str]]:
    """The command line (and environment) that runs case's worker on its architecture."""
    args = [
        "-m", "bench.bench_arm", "one", "--artifact", str(ARTIFACTS[case.artifact]),
        "--precision", case.precision, "--mode", case.mode, "--attention", str(case.attention),
        "--tokens", str(case.tokens), "--window", str(case.window), "--threads", str(threads),
    ]  # fmt: skip
    if case.arch == "x86_64" and case.mode == "chunked" and case.attention == 8 and case.precision == "low":
        args.append("--probe")  # on ARM the fp16-vs-fp32 ppl pair shows it; two more loads cost minutes
    if case.arch == "x86_64":
        return [sys.executable, *args], dict(os.environ)
    from scripts.arm64_env import ensure

    env = ensure()
    return env.command(args), env.environ()


def run_case(case: Case, threads: int, on_progress: Callable[[int, float], None]) -> dict[str, Any]:
    """Run one worker process; its JSON plus MNN's CPU probe line. Progress lines pass through."""
    cmd, env = command(case, threads)
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stdout is not None
    err: list[str] = []
    for line in proc.stderr:  # stdout holds one JSON line (and MNN's printf): read after stderr ends
        err.append(line)
        if m := PROGRESS.match(line):
            print(f"[bench_arm] {case.name}: {line.strip()}", file=sys.stderr, flush=True)
            on_progress(int(m.group(1)), float(m.group(2)))
    out = proc.stdout.read()
    if proc.wait() != 0:
        return {"error": (out + "".join(err))[-2000:]}
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    # MNN prints its CPU probe with C printf; the engine sends fd 1 to stderr while it loads.
    cpu = MNN_CPU_LINE.search(out + "".join(err))
    result["mnn_cpu"] = cpu.group(0) if cpu else ""
    return {**asdict(case), **result}


def table(results: dict[str, dict[str, Any]]) -> str:
    """Markdown rows: one per case, with the ratio to the x86 case of the same artifact and mode."""
    lines = ["| case | ppl | vs x86 | note |", "|---|---:|---:|---|"]
    for key, r in results.items():
        if "partial" in r and "ppl" not in r:
            got = r["partial"]
            lines.append(f"| {key} | {got['ppl']:.3f} | | cut off: first {got['tokens']} tokens scored |")
            continue
        if "ppl" not in r:
            lines.append(f"| {key} | error | | {r.get('error', '')[-80:]!r} |")
            continue
        base = results.get(key.replace("aarch64/", "x86_64/", 1), {}).get("ppl")
        ratio = f"{r['ppl'] / base:.4f}" if base else ""
        note = (
            f"low-vs-high logit diff {r['low_vs_high_max_abs_logit_diff']}"
            if "low_vs_high_max_abs_logit_diff" in r
            else ""
        )
        lines.append(f"| {key} | {r['ppl']:.3f} | {ratio} | {note} |")
    return "\n".join(lines)


def run_all(ns: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every case not yet in --out, ns.jobs at a time; the file is rewritten after each."""
    results: dict[str, dict[str, Any]] = json.loads(ns.out.read_text()) if ns.out.is_file() else {}
    todo = [c for c in CASES if "ppl" not in results.get(c.name, {}) and (not ns.only or c.name in ns.only)]
    ns.out.parent.mkdir(parents=True, exist_ok=True)

    def work(case: Case) -> None:
        print(f"[bench_arm] {case.name} ...", file=sys.stderr, flush=True)

        curve: list[list[float]] = []

        def partial(tokens: int, ppl: float) -> None:
            # Why: an emulated case can outlast a deadline; the file then says how far it got, and
            # the curve lets a cut-off case be paired with its twin at the same token count.
            curve.append([tokens, round(ppl, 3)])
            got = {"tokens": tokens, "ppl": round(ppl, 3), "curve": curve}
            results[case.name] = {**asdict(case), "partial": got}
            ns.out.write_text(json.dumps(results, indent=1, sort_keys=True))

        results[case.name] = {**run_case(case, ns.threads, partial), "curve": curve}
        print(
            f"[bench_arm] {case.name}: {results[case.name].get('ppl', 'error')}", file=sys.stderr, flush=True
        )
        ns.out.write_text(json.dumps(results, indent=1, sort_keys=True))

    with ThreadPoolExecutor(ns.jobs) as pool:
        list(pool.map(work, todo))
    return {c.name: results[c.name] for c in CASES if c.name in results}


def main() -> int:
    """CLI."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("all", "one", "table"))
    ap.add_argument("--artifact", type=Path, default=ARTIFACTS["default"])
    ap.add_argument("--precision", choices=("low", "normal", "high"), default="low")
    ap.add_argument("--mode", choices=("chunked", "single", "window"), default="chunked")
    ap.add_argument("--attention", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024, help="first N wikitext2-test tokens (one)")
    ap.add_argument(
        "--window", type=int, default=256, help="window mode: tokens kept after the 4 sinks (one)"
    )
    ap.add_argument("--threads", type=int, default=1, help="MNN threads per worker (default 1)")
    ap.add_argument("--probe", action="store_true", help="also compare precision low and high logits")
    ap.add_argument("--jobs", type=int, default=2, help="workers at once (all)")
    ap.add_argument("--only", nargs="*", default=[], help="run only the cases of these names (all)")
    ap.add_argument("--out", type=Path, default=REPO / ".cache" / "bench" / "arm_quality.json")
    ns = ap.parse_args()
    if ns.what == "one":
        print(json.dumps(one(ns)))
        return 0
    results = run_all(ns) if ns.what == "all" else json.loads(ns.out.read_text())
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
