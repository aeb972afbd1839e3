"""`edgellm eval ARTIFACT_DIR`: perplexity of the real artifact (and fp reference when available)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from edgellm.common.paths import require_data_file, resolve_artifact

EVAL_FILE = "wikitext2-test.txt"  # the default evaluation text (edgellm.host.evaluate.evaluate)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `eval` subcommand."""
    p = sub.add_parser("eval", help="perplexity / top-1 / KL of an MNN artifact on wikitext2-test")
    p.add_argument(
        "artifact", type=Path, help="artifact directory, or 'default' (the cached default artifact)"
    )
    p.add_argument("--text", type=Path, default=None, help="evaluation text (default wikitext2-test)")
    p.add_argument("--tokens", type=int, default=2048, help="evaluation tokens from the start of the text")
    p.add_argument("--context", type=int, default=512, help="tokens per scoring window")
    p.add_argument("--stride", type=int, default=256, help="window step (overlap = context - stride)")
    p.add_argument(
        "--reference", type=Path, default=None, help="fp HF checkpoint (default: from the manifest)"
    )
    p.add_argument("--kv", action="store_true", help="also measure INT8 KV cache (attention_mode 8/9/10)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    """Evaluate; a missing artifact or text exits 2."""
    from edgellm.host.evaluate.artifact import evaluate_artifact, reference_dir
    from edgellm.host.evaluate.evaluate import EvalConfig
    from edgellm.host.progress_bar import progress_bar

    artifact = resolve_artifact(ns.artifact)
    try:  # before loading anything: the text is there (evaluate_artifact checks the artifact first)
        if ns.text is None:
            require_data_file(EVAL_FILE)
        elif not ns.text.is_file():
            raise FileNotFoundError(f"evaluation text {ns.text} not found")
    except FileNotFoundError as exc:
        sys.stderr.write(f"edgellm eval: {exc}\n")
        return 2
    cfg = EvalConfig(text_file=ns.text, tokens=ns.tokens, context=ns.context, stride=ns.stride)
    reference, why = (ns.reference, "") if ns.reference else reference_dir(artifact)
    try:
        with progress_bar("eval", enabled=not ns.json) as progress:
            result = evaluate_artifact(artifact, cfg, reference, (8, 9, 10) if ns.kv else (), progress)
    except (ValueError, FileNotFoundError) as exc:
        sys.stderr.write(f"edgellm eval: {exc}\n")
        return 2
    if ns.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    _print_result(result, why)
    return 0


def _print_result(result: dict[str, Any], why: str) -> None:
    """The table, what was not measured and why, and the protocol behind the perplexity."""
    from edgellm.host.evaluate.report import protocol, table

    sys.stdout.write(table(result["results"]) + "\n")
    sys.stdout.write(f"perplexity: {protocol(result)}; mnn = the artifact through MNN's prefill path\n")
    if result["reference"] is None:  # issue 12: top-1/KL printed as 0.0000 read as a measurement
        sys.stdout.write(f"top-1 and KL not measured: no fp reference ({why}); pass --reference HF_DIR\n")
    if "kv_cache" in result:
        sys.stdout.write("KV cache (each window decoded one token per forward):\n")
        sys.stdout.write(table(result["kv_cache"], ("ppl", "tokens")) + "\n")
    sys.stdout.write(f"size {result['size_bytes'] / 1e6:.1f} MB\n")
