"""`edgellm quantize`: HF model -> plan -> faithful MNN artifact, with its measured quality."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def relative_budget(text: str) -> float:
    """A relative perplexity budget: '0.03' or '3%' both mean 3%."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a relative budget such as 0.03 or 3%") from None
    if not 0 < value < 10:
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: give a relative budget such as 0.03 or 3%"
        )
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `quantize` subcommand."""
    p = sub.add_parser(
        "quantize", help="quantize a model (RTN/AWQ/GPTQ, plans, auto budget) to an MNN artifact"
    )
    p.add_argument("--model", default="default", help="'default' (embedded SmolLM2) or an HF checkpoint dir")
    p.add_argument(
        "--method",
        choices=("rtn", "awq", "gptq"),
        default="gptq",
        help="gptq (default; also auto's base) | rtn | awq: AWQ is not shown to beat RTN on SmolLM2's "
        "decode path (an independent evaluation measured it 6%% worse; docs/benchmarks.md), so no "
        "default or preset picks it",
    )
    p.add_argument("--bits", type=int, choices=(4, 8), default=4)
    p.add_argument("--block", type=int, default=64, help="block size along the input (0 = per channel)")
    p.add_argument("--plan", default="int4", help="int4 | int8 | mixed | auto | plan JSON file")
    p.add_argument(
        "--ppl-budget", type=relative_budget, default=0.0, help="for --plan auto: relative, e.g. 0.03 or 3%%"
    )
    p.add_argument("--kv", choices=("fp", "int8_k", "int8_kv"), default=None, help="KV-cache precision")
    p.add_argument("--calib", type=Path, default=None, help="calibration text (default wikitext2-valid)")
    p.add_argument("--calib-samples", type=int, default=128)
    p.add_argument("--calib-len", type=int, default=256, help="tokens per calibration sample")
    p.add_argument("--tokens", type=int, default=2048, help="evaluation tokens of wikitext2-test")
    p.add_argument("--save-plan", type=Path, default=None, help="also write the plan used as JSON")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("-o", "--output", type=Path, required=True)
    p.set_defaults(handler=run)


def _budget(raw: float) -> float:
    return raw / 100 if raw >= 1 else raw


def run(ns: argparse.Namespace) -> int:
    """Quantize; bad input exits 2 with one line."""
    from dataclasses import replace

    from edgellm.host.evaluate.evaluate import EvalConfig
    from edgellm.host.evaluate.report import table
    from edgellm.host.job_rpcs import make_plan
    from edgellm.host.progress_bar import progress_bar
    from edgellm.host.quantize.pipeline import Session, resolve_model_dir
    from edgellm.host.quantize.plan import Calibration, PlanError, with_calibration

    calib = Calibration(
        file=str(ns.calib) if ns.calib else Calibration().file, samples=ns.calib_samples, seq_len=ns.calib_len
    )
    try:
        plan = None
        if ns.plan != "auto":
            plan = with_calibration(make_plan(ns.plan, ns.method, ns.bits, ns.block), calib)
            if ns.kv:
                plan = replace(plan, kv_cache=ns.kv)
        elif not 0 < _budget(ns.ppl_budget) < 1:
            raise ValueError("--plan auto needs --ppl-budget, e.g. 0.03")
        session = Session.open(resolve_model_dir(ns.model), EvalConfig(tokens=ns.tokens))
    except (ValueError, PlanError, FileNotFoundError) as exc:
        sys.stderr.write(f"edgellm quantize: {exc}\n")
        return 2
    with progress_bar("quantize", enabled=not ns.json) as progress:
        try:
            if plan is None:
                from edgellm.host.quantize.auto import search_plan

                result = search_plan(
                    session, _budget(ns.ppl_budget), ns.output, ns.method, ns.block or 64, progress
                )
            else:
                result = session.build(plan, ns.output, progress)
        except (ValueError, PlanError, FileNotFoundError) as exc:
            sys.stderr.write(f"edgellm quantize: {exc}\n")
            return 2
    if ns.save_plan:
        ns.save_plan.write_text(json.dumps(result["plan"], indent=2) + "\n", encoding="utf-8")
    if ns.json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
        return 0
    if "auto" in result:
        sys.stdout.write("auto candidates (held-out valid text, torch):\n")
        for c in result["auto"]["candidates"]:
            sys.stdout.write(
                f"  k={c['k']:>3} INT8 units  size {c['size_bytes'] / 1e6:7.2f} MB  ppl {c['ppl']:.3f}\n"
            )
    ev = result["evaluation"]
    sys.stdout.write(table(ev["results"]) + "\n")
    sys.stdout.write(
        f"{ns.output}: {result['size_bytes'] / 1e6:.1f} MB, quantized in {result['quantize_seconds']:.0f} s, "
        f"quick check: first {ev['tokens']} dev tokens of wikitext2-test (context {ev['context']}, "
        f"stride {ev['stride']}); both paths with 95% intervals: edgellm eval {ns.output}\n"
    )
    return 0
