"""`edgellm convert --model default|HF_DIR -o DIR`: build a verified MNN artifact."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

# Nothing heavy at import time: src/edgellm/cli.py imports every command module, on a phone too.


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `convert` subcommand."""
    p = sub.add_parser("convert", help="GGUF/HF checkpoint -> verified MNN artifact with a manifest")
    p.add_argument("--model", default="default", help="'default' (embedded SmolLM2) or an HF checkpoint dir")
    p.add_argument("-o", "--output", type=Path, required=True, help="artifact directory to create")
    p.add_argument("--bits", type=int, choices=(4, 8), default=None, help="weight bits (default 4)")
    p.add_argument("--block", type=int, default=None, help="quant block, 0 = per-channel (default 32)")
    p.add_argument("--lm-bits", type=int, choices=(4, 8), default=None, help="lm_head bits (default 8)")
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Convert; bad input exits 2, a failed check or export exits 1, each with one line."""
    from edgellm.common.paths import require_data_file
    from edgellm.host.convert.llmexport_adapter import ExportFailed
    from edgellm.host.convert.pipeline import convert
    from edgellm.host.convert.verify import EVAL_FILE, ConversionCheckFailed

    given = {"bits": ns.bits, "block": ns.block, "lm_bits": ns.lm_bits}
    options: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    try:
        require_data_file(EVAL_FILE)  # the check at the end needs it: fail now, not after the export
        manifest = convert(ns.model, ns.output, force=ns.force, **options)
    except (ValueError, FileExistsError, FileNotFoundError) as exc:
        sys.stderr.write(f"edgellm convert: {exc}\n")
        return 2
    except (ConversionCheckFailed, ExportFailed) as exc:
        sys.stderr.write(f"edgellm convert: {exc}\n")
        return 1
    c = manifest.checks
    sys.stdout.write(
        f"{ns.output}: ppl torch {c['torch_ppl']:.2f} mnn {c['mnn_ppl']:.2f} "
        f"(prefill {c['mnn_ppl_prefill']:.2f}, decode {c['mnn_ppl_decode']:.2f}), "
        f"next-token agreement {c['agree_count']}/{c['prompts']}, {manifest.conversion_seconds}s; "
        f"perplexity over the first {c['eval_tokens']} tokens of wikitext2-test in one window\n"
    )
    return 0
