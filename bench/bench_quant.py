"""Quantization benchmark on the default model: one row per plan (torch and MNN perplexity, top-1, size, time).

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
    ap.add_argument("--configs", nargs="+", required=True)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--out", type=Path, default=cache_dir() / "bench" / "quant.json")
    args = ap.parse_args()
    session = Session.open(resolve_model_dir("default"), EvalConfig(tokens=args.tokens))
    rows: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    for name in args.configs:
        start = time.perf_counter()
        if name.startswith("auto-"):
            from host_service.quantize.auto import search_plan

            budget = float(name.split("-")[1]) / 100
            out = cache_dir() / "bench" / name
            result = search_plan(session, budget, out, method="gptq")
        else:
            result = session.build(plan_for(name), cache_dir() / "bench" / name)
        result["wall_seconds"] = round(time.perf_counter() - start, 1)
        rows[name] = result
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1, default=str))
        r = result["evaluation"]["results"]
        print(
            f"{name:14s} fp {r['fp']['ppl']:.3f} torch {r['torch']['ppl']:.3f} mnn {r['mnn']['ppl']:.3f} "
            f"top1 {r['mnn']['top1']:.3f} kl {r['mnn']['kl']:.4f} size {result['size_bytes'] / 1e6:.1f}MB "
            f"quant {result['quantize_seconds']:.0f}s wall {result['wall_seconds']:.0f}s",
            flush=True,
        )


if __name__ == "__main__":
    main()
