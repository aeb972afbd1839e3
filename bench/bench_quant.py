"""Quantization benchmark on the default model: one row per plan (torch/MNN ppl, top-1, size, time).

Usage: .venv/bin/python bench/bench_quant.py --configs rtn-b64 gptq-b64 ... [--tokens 2048] [--out FILE]
Config names: int8 (block 64), int8-b{0,32,64,192}, {rtn,gptq,awq}-b{32,64}, mixed-{rtn,gptq,awq}-b64,
auto-{3,8} (GPTQ-based search), auto-size-mixed (auto at the size of mixed-gptq-b64, run that first).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from edgellm.common.paths import cache_dir
from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.builder.pipeline import build_artifact
from edgellm.host.evaluate.evaluate import EvalConfig
from edgellm.host.quantize.plan import QuantPlan, preset


def plan_for(name: str) -> QuantPlan:
    """Plan for a benchmark config name."""
    parts = name.split("-")
    if parts[0] == "int8":  # int8 (block 64) or int8-bN
        return preset("int8", block=int(parts[1][1:]) if len(parts) > 1 else 64)
    if parts[0] == "mixed":
        return preset("mixed", method=parts[1], block=int(parts[2][1:]))
    return preset("int4", method=parts[0], block=int(parts[1][1:]))


def main() -> None:
    """Run the configs, print a table, write JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="*", default=[])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=cache_dir() / "bench" / "quant.json")
    ap.add_argument(
        "--table",
        nargs="*",
        type=Path,
        default=None,
        help="only print the markdown table of these result files (later ones win; default --out)",
    )
    args = ap.parse_args()
    if args.table is not None:
        rows: dict[str, Any] = {}
        for path in args.table or [args.out]:
            rows |= json.loads(path.read_text())
        print(markdown(rows))
        return
    loaded = LoadedModel.open("default", EvalConfig(tokens=args.tokens))
    rows = json.loads(args.out.read_text()) if args.out.is_file() else {}
    for name in args.configs:
        start, cpu = time.perf_counter(), time.process_time()
        if name == "auto-size-mixed":  # auto at the size of the `mixed` recipe's linear weights
            from edgellm.host.quantize import mnn_weights
            from edgellm.host.quantize.auto import search_plan

            slots = mnn_weights.linears(mnn_weights.graph_json(cache_dir() / "bench" / "mixed-gptq-b64"))
            mixed = sum(slot.code_bytes + slot.alpha_len for slot in slots.values())
            base = preset("int4", method="gptq")
            result = search_plan(loaded, base, 0.5, cache_dir() / "bench" / name, size_budget=mixed)
        elif name.startswith("auto-"):
            from edgellm.host.quantize.auto import search_plan

            budget = float(name.split("-")[1]) / 100
            out = cache_dir() / "bench" / name
            result = search_plan(loaded, preset("int4", method="gptq"), budget, out)
        else:
            result = build_artifact(loaded, plan_for(name), cache_dir() / "bench" / name).summary()
        result["wall_seconds"] = round(time.perf_counter() - start, 1)
        result["cpu_seconds"] = round(time.process_time() - cpu, 1)  # excludes the llmexport subprocess
        rows[name] = result
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1, default=str))
        r = result["evaluation"]["results"]
        print(
            f"{name:14s} fp {r['fp']['ppl']:.3f} torch {r['torch']['ppl']:.3f} mnn {r['mnn']['ppl']:.3f} "
            f"top1 {r['mnn']['top1']:.3f} kl {r['mnn']['kl']:.4f} size {result['size_bytes'] / 1e6:.1f}MB "
            f"quant {quantize_seconds(result):.0f}s cpu {result['cpu_seconds']:.0f}s "
            f"wall {result['wall_seconds']:.0f}s",
            flush=True,
        )


def quantize_seconds(row: dict[str, Any]) -> float:
    """Quantization wall seconds of a result row (rows written before the one builder kept them flat)."""
    return float(row["seconds"]["quantize"] if "seconds" in row else row["quantize_seconds"])


ORDER = ("rtn-b64", "awq-b64", "gptq-b64", "rtn-b32", "mixed-gptq-b64", "auto-3", "auto-8", "auto-size-mixed")


def markdown(rows: dict[str, Any]) -> str:
    """The benchmark table in markdown: an fp row, then the issue's order, then anything else."""
    out = [
        "| config | torch ppl | MNN ppl | MNN/torch | Δ vs fp (MNN) | top-1 vs fp | KL vs fp "
        "| size MB | quantize s | quantize CPU s | wall s | bench CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = [n for n in ORDER if n in rows] + sorted(n for n in rows if n not in ORDER)
    if names:
        fp = rows[names[0]]["evaluation"]["results"]["fp"]
        out.append(f"| fp | {fp['ppl']:.3f} | | | | 1 | 0 | | | | | |")
    for name in names:
        r = rows[name]
        e = r["evaluation"]["results"]
        fp, t, m = e["fp"]["ppl"], e["torch"]["ppl"], e["mnn"]["ppl"]
        cpu = "" if r.get("quantize_cpu_seconds") is None else f"{r['quantize_cpu_seconds']:.0f}"
        bench_cpu = "" if r.get("cpu_seconds") is None else f"{r['cpu_seconds']:.0f}"
        out.append(
            f"| {name} | {t:.3f} | {m:.3f} | {m / t - 1:+.2%} | {m / fp - 1:+.1%} | "
            f"{e['mnn']['top1']:.3f} | {e['mnn']['kl']:.4f} | {r['size_bytes'] / 1e6:.1f} | "
            f"{quantize_seconds(r):.0f} | {cpu} | {r.get('wall_seconds', 0):.0f} | {bench_cpu} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    main()
