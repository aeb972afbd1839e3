"""`edgellm convert --model default|HF_DIR|FILE.gguf -o DIR`: build a verified MNN artifact."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from edgellm.host.quantize.cli import add_device_option

if TYPE_CHECKING:
    from edgellm.common.manifest import Checks

# Nothing heavy at import time: src/edgellm/cli.py imports every command module, on a phone too.


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `convert` subcommand."""
    p = sub.add_parser("convert", help="GGUF/HF checkpoint -> verified MNN artifact with a manifest")
    p.add_argument(
        "--model", default="default", help="'default' (embedded SmolLM2), an HF checkpoint dir or a GGUF file"
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="artifact directory to create")
    p.add_argument("--bits", type=int, choices=(4, 8), default=None, help="weight bits (default 4)")
    p.add_argument("--block", type=int, default=None, help="quant block, 0 = per-channel (default 32)")
    p.add_argument("--lm-bits", type=int, choices=(4, 8), default=None, help="lm_head bits (default 8)")
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    add_device_option(p)
    p.add_argument(
        "--reuse",
        action="store_true",
        help="keep the output if it already holds this conversion (same source, plan, schema); else build it",
    )
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Convert; bad input exits 2, a failed check or export exits 1, each with one line."""
    from edgellm.host.convert.gguf_header import source_notice
    from edgellm.host.quantize.families import check_supported

    try:
        # Before the imports below (torch and transformers, ~1.5 s): an unsupported family is
        # refused in milliseconds, naming the supported ones.
        check_supported(ns.model)
        notice = source_notice(ns.model)
    except ValueError as exc:
        sys.stderr.write(f"edgellm convert: {exc}\n")
        return 2
    if notice:
        sys.stderr.write(f"edgellm convert: warning: {notice}\n")
    from edgellm.common.paths import require_data_file
    from edgellm.host.convert.llmexport_adapter import ExportFailed
    from edgellm.host.convert.pipeline import (
        DEFAULT_BITS,
        DEFAULT_BLOCK,
        DEFAULT_LM_BITS,
        convert,
        convert_plan,
        ensure_artifact,
    )
    from edgellm.host.convert.verify import ConversionCheckFailed
    from edgellm.host.evaluate.evaluate import EVAL_FILE
    from edgellm.host.progress_bar import progress_bar

    bits = DEFAULT_BITS if ns.bits is None else ns.bits
    block = DEFAULT_BLOCK if ns.block is None else ns.block
    lm_bits = DEFAULT_LM_BITS if ns.lm_bits is None else ns.lm_bits
    try:
        require_data_file(EVAL_FILE)  # the check at the end needs it: fail now, not after the export
        with progress_bar("convert") as progress:
            if ns.reuse:
                ensure_artifact(ns.model, ns.output, convert_plan(bits, block, lm_bits), progress)
            else:
                convert(
                    ns.model, ns.output, bits, block, lm_bits=lm_bits, force=ns.force, device=ns.device,
                    progress=progress,
                )  # fmt: skip
    except (ValueError, FileExistsError, FileNotFoundError) as exc:
        sys.stderr.write(f"edgellm convert: {exc}\n")
        return 2
    except (ConversionCheckFailed, ExportFailed) as exc:
        sys.stderr.write(f"edgellm convert: {exc}\n")
        return 1
    sys.stdout.write(describe(ns.output) + "\n")
    return 0


def describe(artifact: Path) -> str:
    """One paragraph: size, the gate's perplexities with the protocol behind them, build time."""
    from edgellm.common.artifact_files import read_manifest

    m, _ = read_manifest(artifact)
    lines = [f"{artifact}: {m.name}, {m.quantization.label} (lm_head int{m.quantization.lm_head_bits}), "
             f"{m.size_bytes / 1e6:.1f} MB, built in {m.build.seconds.get('total', 0):.0f} s"]  # fmt: skip
    c = m.checks
    if c is not None:
        lines.append(
            f"  ppl torch fp {c.torch_ppl:.2f}, mnn {c.mnn_ppl:.2f} (prefill {c.mnn_ppl_prefill:.2f}, "
            f"decode {c.mnn_ppl_decode:.2f}): first {c.eval_tokens} tokens of {c.eval_file} as one window"
        )
        lines.extend(_fidelity_lines(c))
        lines.append(f"  next-token agreement with torch fp {c.agree_count}/{c.prompts} prompts")
    return "\n".join(lines)


def _fidelity_lines(c: Checks) -> list[str]:
    """The fidelity gate's figures per MNN path (absent from artifacts built before it)."""
    out = []
    for path, f in (("prefill", c.fidelity_prefill), ("decode", c.fidelity_decode)):
        if f is None:
            continue
        top1 = "-" if f.top1_clear is None else f"{f.top1_clear:.3f}"
        buckets = ", ".join(f"{k} {v:.1e}" for k, v in f.kl_by_position.items())
        out.append(
            f"  {path}: KL(torch quantized‖MNN) {f.kl_mean:.1e} (limit {c.max_kl:g}; by position {buckets}), "
            f"top-1 {top1} at {f.n_clear} confident positions"
        )
    return out
