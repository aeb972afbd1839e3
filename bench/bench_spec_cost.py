"""The cost side of speculation: verify cost per draft length by model size, and the gain it predicts.

1. Verify cost: on each artifact, after a `--prefill`-token prompt, the median time of one forward
   of k + 1 tokens (`Engine.verify`, a draft of k; k = 1..8) ÷ one decode step, `--reps` rounds,
   lengths interleaved within each round so load drift hits all alike. Timed: the forward only (the
   rewind after it is not), in process CPU time unless `--clock wall`. Works on the random-weight
   scale checkpoints (bench/scale_shapes.py): a forward's time depends on the shapes, not the
   values. The break-even acceptance of each k is
   the per-token acceptance a at which (1 − a^(k+1)) / (1 − a) tokens per verify equal its cost.
2. Predicted gain: from a bench_spec results file (`--results`, the `kinds` set, greedy), each
   prompt's plain answer is replayed through the loop's drafter (`NgramDrafter` over the chat
   prompt and the answer so far) with exact acceptance — a draft token is accepted iff it is plain
   decoding's token — and a fixed largest draft K (a turn verifies the largest allowed k ≤ K the
   drafter has tokens for, else takes a plain step). Predicted speed-up = plain decode time ÷ the
   replay's forward time with each model's measured costs. It assumes every model answers with the
   135M model's tokens (its acceptance) and leaves out per-token host work (drafting, sampling), so
   set it beside the measured 135M `fast` ÷ plain of the same results file.

Usage: python -m bench.bench_spec_cost --artifact default=.cache/artifacts/default \
         --artifact qwen2.5-0.5b=PATH --artifact llama-3.2-1b=PATH [--threads 1] [--reps 9] \
         [--results bench/results/spec-kinds-….json] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bench_spec import load_set
from bench.spec_kinds import KINDS
from edgellm.device.decoding import CALIBRATION_TEXT
from edgellm.device.drafting import NgramDrafter
from edgellm.device.generation import GenerationJob, render_prompt
from edgellm.device.sampler import SamplingConfig
from edgellm.engine.artifact import open_artifact
from edgellm.engine.config import DRAFT_LENGTHS, EngineConfig
from edgellm.engine.mnn import MnnEngine

DRAFTS = range(1, 9)
Answer = tuple[str, str, list[int], list[int]]  # kind, half, chat prompt ids, plain answer ids
Clock = Callable[[], float]
# Process CPU time by default: on a shared machine other processes stretch a forward's wall time at
# random, not its CPU time (one MNN thread computes in the calling thread: CPU ≈ wall when quiet).
CLOCKS: dict[str, Clock] = {"cpu": time.process_time, "wall": time.perf_counter}


def forward_seconds(engine: MnnEngine, prefill: int, reps: int, clock: Clock) -> dict[int, float]:
    """Median seconds of a forward of n = 1..9 tokens after a `prefill`-token prompt, on `clock`."""
    ids = (engine.encode(CALIBRATION_TEXT) * 8)[:prefill]
    token = int(engine.prefill(ids).argmax())
    samples: dict[int, list[float]] = {n: [] for n in [1, *(k + 1 for k in DRAFTS)]}
    for rep in range(reps + 1):  # round 0 untimed: MNN clones a module per new verify length
        for n in samples:
            start = clock()
            if n == 1:
                engine.decode(token)
            else:
                engine.verify([token] * n)
            spent = clock() - start
            engine.rewind(n)
            if rep:
                samples[n].append(spent)
    engine.reset()
    return {n: statistics.median(v) for n, v in samples.items()}


def break_even(cost: float, k: int) -> float:
    """Per-token acceptance at which a draft of k pays for a verify `cost` times a decode step."""
    lo, hi = 0.0, 1.0
    for _ in range(40):  # bisection: expected tokens per verify rises monotonically with a
        a = (lo + hi) / 2
        lo, hi = (a, hi) if sum(a**i for i in range(k + 1)) < cost else (lo, a)
    return (lo + hi) / 2


def replay(context: list[int], answer: list[int], most: int) -> list[int]:
    """Forward lengths the loop runs for `answer` with exact acceptance and drafts of at most `most`."""
    drafter = NgramDrafter([*context, *answer[:1]])
    lengths, pos = [], 1  # the prefill gave answer[0]
    allowed = [k for k in DRAFT_LENGTHS if k <= most]
    while pos < len(answer):
        proposal, _ = drafter.draft(min(most, len(answer) - pos))
        k = max((k for k in allowed if k <= len(proposal)), default=0)
        accepted = next((i for i in range(k) if proposal[i] != answer[pos + i]), k)
        step = min(accepted + 1, len(answer) - pos)
        lengths.append(k + 1)
        drafter.extend(answer[pos : pos + step])
        pos += step
    return lengths


def speedup(context: list[int], answer: list[int], most: int, seconds: dict[int, float]) -> float:
    """Predicted decode speed-up of one answer at one model's forward costs."""
    lengths = replay(context, answer, most)
    spent = sum(seconds[n] for n in lengths)
    return (len(answer) - 1) * seconds[1] / spent if spent else 1.0


def per_prompt(rows: list[Answer], seconds: dict[int, float]) -> list[dict[str, Any]]:
    """Each prompt's predicted speed-up per largest draft K, for the results file."""
    return [
        {"kind": kind, "half": half, **{f"K{k}": speedup(c, a, k, seconds) for k in DRAFT_LENGTHS}}
        for kind, half, c, a in rows
    ]


def contexts(engine: MnnEngine, results: Path) -> list[Answer]:
    """(kind, half, chat prompt ids, plain answer ids) of each greedy `kinds` row of a bench_spec file."""
    prompts = load_set("kinds")
    out = []
    for row in json.loads(results.read_text())["edgellm"]:
        if row["set"] != "kinds" or row["temperature"] != 0 or "plain_ids" not in row:
            continue
        job = GenerationJob("cost", None, (("user", prompts[row["index"]]["prompt"]),), 1, SamplingConfig())
        out.append((row["kind"], row["half"], render_prompt(engine, job), row["plain_ids"]))
    return out


def measure(spec: str, args: argparse.Namespace) -> tuple[str, MnnEngine, dict[int, float]]:
    """Load NAME=PATH, time its forwards; the engine stays loaded for tokenizing."""
    name, path = spec.split("=", 1)
    engine = MnnEngine(open_artifact(Path(path)), EngineConfig(threads=args.threads, draft_max=8))
    engine.load()
    engine.warm_up(args.prefill)
    seconds = forward_seconds(engine, args.prefill, args.reps, CLOCKS[args.clock])
    cells = {f"k={n - 1}": f"{seconds[n] / seconds[1]:.2f}" for n in sorted(seconds) if n > 1}
    print(f"{name}: decode {seconds[1] * 1000:.2f} ms; verify ÷ decode {cells}", flush=True)
    return name, engine, seconds


def gain_table(rows: list[Answer], costs: dict[str, dict[int, float]]) -> str:
    """Markdown: median predicted speed-up per kind (both halves) and model, for K = 1, 2, 4, 8."""
    header = "| kind | n | " + " | ".join(f"{m} K={k}" for m in costs for k in DRAFT_LENGTHS) + " |"
    lines = [header, "|---|---:|" + "---:|" * (len(costs) * len(DRAFT_LENGTHS))]
    for kind in KINDS:
        mine = [r for r in rows if r[0] == kind]
        cells = [
            f"{statistics.median(speedup(c, a, k, s) for _, _, c, a in mine):.2f}×"
            for s in costs.values()
            for k in DRAFT_LENGTHS
        ]
        lines.append(f"| {kind} | {len(mine)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cost_table(costs: dict[str, dict[int, float]]) -> str:
    """Markdown: verify ÷ decode and the break-even acceptance per draft length and model."""
    lines = ["| model | decode ms | " + " | ".join(f"k={k}" for k in DRAFTS) + " |"]
    lines.append("|---|---:|" + "---|" * len(DRAFTS))
    for name, s in costs.items():
        cells = [f"{s[k + 1] / s[1]:.2f}× (a≥{break_even(s[k + 1] / s[1], k):.2f})" for k in DRAFTS]
        lines.append(f"| {name} | {s[1] * 1000:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measured(args: argparse.Namespace) -> tuple[dict[str, dict[int, float]], list[Answer]]:
    """Time every artifact; tokenize the results' prompts with the first."""
    costs: dict[str, dict[int, float]] = {}
    rows: list[Answer] = []
    for i, spec in enumerate(args.artifact):
        name, engine, costs[name] = measure(spec, args)
        if i == 0 and args.results:
            rows = contexts(engine, args.results)
        engine.close()
    return costs, rows


def reused(args: argparse.Namespace) -> tuple[dict[str, dict[int, float]], list[Answer]]:
    """The forward times of an earlier run; the first --artifact only tokenizes."""
    saved = json.loads(args.costs.read_text())["forward_seconds"]
    costs = {name: {int(n): v for n, v in s.items()} for name, s in saved.items()}
    engine = MnnEngine(open_artifact(Path(args.artifact[0].split("=", 1)[1])), EngineConfig(threads=1))
    engine.load()
    rows = contexts(engine, args.results) if args.results else []
    engine.close()
    return costs, rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifact", action="append", required=True, help="NAME=PATH; the first tokenizes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu", help="what a forward's time is")
    parser.add_argument("--results", type=Path, default=None, help="a bench_spec --sets kinds results file")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--costs", type=Path, default=None, help="forward times of an earlier --out")
    args = parser.parse_args()
    out: dict[str, Any] = {"start_loadavg": os.getloadavg(), "args": vars(args)}
    costs, rows = reused(args) if args.costs else measured(args)
    print(f"\n{cost_table(costs)}")
    if rows:
        print(f"\n{gain_table(rows, costs)}")
    out |= {"end_loadavg": os.getloadavg(), "forward_seconds": costs}
    if rows:
        out["predicted"] = {name: per_prompt(rows, s) for name, s in costs.items()}
    if args.out:
        args.out.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
