"""`edgellm quantize`: HF model -> plan -> faithful MNN artifact, with its measured quality."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def relative_budget(text: str) -> float:
    """A relative perplexity budget: '0.03' or '3%' both mean 3%."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a relative budget such as 0.03 or 3%") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: give a relative budget such as 0.03 or 3% (between 0 and 1)"
        )
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `quantize` subcommand."""
    p = sub.add_parser(
        "quantize", help="quantize a model (RTN/AWQ/GPTQ, plans, auto budget) to an MNN artifact"
    )
    p.add_argument(
        "--model", default="default", help="'default' (embedded SmolLM2), an HF checkpoint dir or a GGUF file"
    )
    p.add_argument(
        "--method",
        choices=("rtn", "awq", "gptq"),
        default=None,
        help="default gptq (also auto's base); awq beats rtn on SmolLM2 but removes less of rtn's "
        "perplexity increase than gptq (~70%% vs ~75%% on the held-out slice, both paths; "
        "docs/benchmarks.md), so no default or preset picks it",
    )
    p.add_argument("--bits", type=int, choices=(4, 8), default=None, help="default 4 (8 for --plan int8)")
    p.add_argument(
        "--block", type=int, default=None, help="block size along the input (0 = per channel; default 64)"
    )
    p.add_argument("--plan", default="int4", help="int4 | int8 | mixed | auto | plan JSON file")
    p.add_argument(
        "--ppl-budget", type=relative_budget, default=None, help="for --plan auto: relative, e.g. 0.03 or 3%%"
    )
    p.add_argument(
        "--kv", choices=("fp", "int8_k", "int8_kv"), default=None, help="KV-cache precision (default fp)"
    )
    p.add_argument("--calib", type=Path, default=None, help="calibration text (default wikitext2-valid)")
    p.add_argument("--calib-samples", type=int, default=None, help="default 128")
    p.add_argument("--calib-len", type=int, default=None, help="tokens per calibration sample (default 256)")
    p.add_argument("--tokens", type=int, default=2048, help="evaluation tokens of wikitext2-test")
    p.add_argument("--save-plan", type=Path, default=None, help="also write the plan applied as JSON")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_device_option(p)
    p.add_argument("-o", "--output", type=Path, required=True, help="artifact directory to create")
    p.set_defaults(handler=run)


def add_device_option(p: argparse.ArgumentParser) -> None:
    """``--device auto|cpu|cuda`` (quantize/device.py), shared by quantize and convert."""
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where GPTQ/AWQ/RTN compute, one decoder layer at a time: auto = cuda when torch sees a GPU",
    )


def _check_inputs(calibration_file: str) -> None:
    """The evaluation and calibration texts exist, before minutes of loading (issue 12)."""
    from edgellm.common.paths import require_data_file

    require_data_file("wikitext2-test.txt")
    calib = Path(calibration_file)
    if calib.is_absolute() or calib.parent != Path():
        if not calib.is_file():
            raise FileNotFoundError(f"calibration text {calib} not found")
    else:
        require_data_file(calibration_file)  # a bare name resolves against the data directory


def run(ns: argparse.Namespace) -> int:
    """Quantize; bad input exits 2 with one line."""
    from edgellm.host.evaluate.evaluate import EvalConfig
    from edgellm.host.progress_bar import progress_bar
    from edgellm.host.quantize.plan import PlanError
    from edgellm.host.quantize.run import make_job, run_job

    calibration = {
        "file": str(ns.calib) if ns.calib else None,
        "samples": ns.calib_samples,
        "seq_len": ns.calib_len,
    }
    try:
        job = make_job(
            ns.model,
            ns.plan,
            ns.output,
            budget=ns.ppl_budget,
            evaluation=EvalConfig(tokens=ns.tokens),
            method=ns.method,
            bits=ns.bits,
            block=ns.block,
            kv_cache=ns.kv,
            calibration=calibration,
            device=ns.device,
        )
        _check_inputs(job.plan.calibration.file)
        _warn_source(ns.model)
        with progress_bar("quantize", enabled=not ns.json) as progress:
            result = run_job(job, progress)
    except (ValueError, PlanError, FileNotFoundError) as exc:
        sys.stderr.write(f"edgellm quantize: {exc}\n")
        return 2
    if ns.save_plan:
        ns.save_plan.write_text(json.dumps(result["plan"], indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n" if ns.json else report(result) + "\n")
    return 0


def _warn_source(model: str) -> None:
    """Say once, before the long work, that a quantized GGUF source bounds the artifact's quality."""
    from edgellm.host.convert.gguf_header import source_notice

    notice = source_notice(model)
    if notice:
        sys.stderr.write(f"edgellm quantize: warning: {notice}\n")


def report(result: dict[str, Any]) -> str:
    """The human summary: auto's candidates, the evaluation table and the protocol behind each figure."""
    from edgellm.common.score_table import table
    from edgellm.host.evaluate.report import protocol

    lines = []
    if "auto" in result:
        a = result["auto"]
        lines.append(
            f"auto candidates (torch, {a['held_out']}; fp {a['held_out_fp_ppl']:.3f}, "
            f"target {a['target_ppl']:.3f}):"
        )
        lines += [
            f"  k={c['k']:>3} INT8 units  size {c['size_bytes'] / 1e6:7.2f} MB  ppl {c['ppl']:.3f}"
            for c in result["auto"]["candidates"]
        ]
    ev = result["evaluation"]
    lines.append(table(ev["results"]))
    lines.append(f"perplexity over the {protocol(ev)}; mnn = the artifact through MNN's prefill path")
    lines.append(
        f"{result['artifact']}: {result['size_bytes'] / 1e6:.1f} MB, "
        f"quantized in {result['seconds']['quantize']:.0f} s, built in {result['seconds']['total']:.0f} s; "
        f"both paths with 95% intervals: edgellm eval {result['artifact']}"
    )
    return "\n".join(lines)
