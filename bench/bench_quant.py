"""Quantization benchmark on the default model: one row per plan (torch/MNN ppl, top-1, size, time).

Usage: .venv/bin/python bench/bench_quant.py --configs rtn-b64 gptq-b64 ... [--tokens 2048] [--out FILE]
Config names: fp, int8, {rtn,gptq,awq}-b{32,64}, mixed-{rtn,gptq,awq}-b64, auto-{3,8} (GPTQ-based search).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from common.paths import cache_dir
from host_service.evaluate.evaluate import EvalConfig
from host_service.quantize.pipeline import Session, resolve_model_dir
from host_service.quantize.plan import QuantPlan, preset


def plan_for(name: str) -> QuantPlan:
    """Plan for a benchmark config name."""
    if name == "int8":
        return preset("int8")
    parts = name.split("-")
    if parts[0] == "mixed":
        return preset("mixed", method=parts[1], block=int(parts[2][1:]))
    return preset("int4", method=parts[0], block=int(parts[1][1:]))


def main() -> None:
    """Run the configs, print a table, write JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="*", default=[])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=cache_dir() / "bench" / "quant.json")
    ap.add_argument("--table", action="store_true", help="only print the markdown table of --out")
    args = ap.parse_args()
    if args.table:
        print(markdown(json.loads(args.out.read_text())))
        return
    session = Session.open(resolve_model_dir("default"), EvalConfig(tokens=args.tokens))
    rows: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    for name in args.configs:
        start, cpu = time.perf_counter(), time.process_time()
        if name == "auto-size-mixed":  # auto at the size of the `mixed` recipe's linear weights
            from host_service.quantize import mnn_weights
            from host_service.quantize.auto import search_plan

            slots = mnn_weights.linears(mnn_weights.graph_json(cache_dir() / "bench" / "mixed-gptq-b64"))
            mixed = sum(slot.code_bytes + slot.alpha_len for slot in slots.values())
            result = search_plan(session, 0.5, cache_dir() / "bench" / name, method="gptq", size_budget=mixed)
        elif name.startswith("auto-"):
            from host_service.quantize.auto import search_plan

            budget = float(name.split("-")[1]) / 100
            out = cache_dir() / "bench" / name
            result = search_plan(session, budget, out, method="gptq")
        else:
            result = session.build(plan_for(name), cache_dir() / "bench" / name)
        result["wall_seconds"] = round(time.perf_counter() - start, 1)
        result["cpu_seconds"] = round(time.process_time() - cpu, 1)  # excludes the llmexport subprocess
        rows[name] = result
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1, default=str))
        r = result["evaluation"]["results"]
        print(
            f"{name:14s} fp {r['fp']['ppl']:.3f} torch {r['torch']['ppl']:.3f} mnn {r['mnn']['ppl']:.3f} "
            f"top1 {r['mnn']['top1']:.3f} kl {r['mnn']['kl']:.4f} size {result['size_bytes'] / 1e6:.1f}MB "
            f"quant {result['quantize_seconds']:.0f}s cpu {result['cpu_seconds']:.0f}s "
            f"wall {result['wall_seconds']:.0f}s",
            flush=True,
        )


def markdown(rows: dict[str, Any]) -> str:
    """The benchmark table in markdown."""
    out = [
        "| config | fp ppl | torch ppl | MNN ppl | MNN/torch | Δ vs fp (MNN) | top-1 vs fp | KL vs fp "
        "| size MB | quantize s | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        e = r["evaluation"]["results"]
        fp, t, m = e["fp"]["ppl"], e["torch"]["ppl"], e["mnn"]["ppl"]
        out.append(
            f"| {name} | {fp:.3f} | {t:.3f} | {m:.3f} | {m / t - 1:+.2%} | {m / fp - 1:+.1%} | "
            f"{e['mnn']['top1']:.3f} | {e['mnn']['kl']:.4f} | {r['size_bytes'] / 1e6:.1f} | "
            f"{r['quantize_seconds']:.0f} | {r.get('wall_seconds', 0):.0f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    main()
