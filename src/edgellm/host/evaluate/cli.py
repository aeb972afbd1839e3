"""`edgellm eval ARTIFACT...`: perplexity through the prefill and decode paths, with paired intervals."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from edgellm.common.paths import require_data_file, resolve_artifact
from edgellm.host.jobs import Progress

EVAL_FILE = "wikitext2-test.txt"  # the default evaluation text (edgellm.host.evaluate.evaluate)

EPILOG = """\
Each artifact is scored on the same documents of WikiText-2 test through both paths it is used
by: prefill windows (--context/--stride) and decode, one token per forward from an empty cache,
on the daemon's own engine and KV settings. Intervals are 95% paired block bootstraps. The test
text is split by article: --slice dev (articles 0-30) is for every tuning decision; --slice heldout
(articles 31-61) is for final reports only. --legacy prints the old single-window-set figures
(ppl/top-1/KL on the first --tokens test tokens) and --kv the INT8 KV-cache modes.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `eval` subcommand."""
    p = sub.add_parser(
        "eval",
        help="perplexity of MNN artifacts (prefill and decode paths, 95%% intervals) on wikitext2-test",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "artifact",
        type=Path,
        nargs="+",
        help="MNN artifact directories (NAME=DIR to name one; 'default' = the cached default artifact)",
    )
    p.add_argument("--text", type=Path, default=None, help="evaluation text (default wikitext2-test)")
    p.add_argument(
        "--slice", choices=("dev", "heldout"), default="dev", help="dev for tuning, heldout for final reports"
    )
    p.add_argument("--tokens", type=int, default=8192, help="tokens of the slice to score")
    p.add_argument("--doc-tokens", type=int, default=2048, help="longest document (decode context)")
    p.add_argument("--context", type=int, default=512, help="prefill window")
    p.add_argument("--stride", type=int, default=256, help="prefill window stride")
    p.add_argument(
        "--paths",
        nargs="+",
        choices=("prefill", "decode"),
        default=["prefill", "decode"],
        help="default both",
    )
    p.add_argument(
        "--reference", type=Path, default=None, help="fp HF checkpoint (default: from the manifest)"
    )
    p.add_argument("--no-fp", action="store_true", help="do not score the fp reference")
    p.add_argument("--baseline", default=None, help="name of the artifact deltas are taken against")
    p.add_argument("--legacy", action="store_true", help="the old protocol (first --tokens, ppl/top-1/KL)")
    p.add_argument("--kv", action="store_true", help="with --legacy: INT8 KV cache (attention_mode 8/9/10)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=run)


def _named(raw: Path) -> tuple[str, Path]:
    text = str(raw)
    if "=" in text and not Path(text).exists():
        name, _, where = text.partition("=")
        return name, resolve_artifact(where)
    artifact = resolve_artifact(raw)
    return ("default" if text == "default" else artifact.resolve().name), artifact


def _require_text(text: Path | None) -> None:
    """FileNotFoundError unless the evaluation text (the bundled one when None) is there."""
    if text is None:
        require_data_file(EVAL_FILE)
    elif not text.is_file():
        raise FileNotFoundError(f"evaluation text {text} not found")


def _require_artifacts(paths: list[Path]) -> None:
    """FileNotFoundError for the first path that is not an MNN artifact."""
    for path in paths:
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not an MNN artifact (no config.json)")


def run(ns: argparse.Namespace) -> int:
    """Evaluate; a missing artifact or text exits 2."""
    from edgellm.host.evaluate.artifact import reference_dir
    from edgellm.host.progress_bar import progress_bar

    named = [_named(a) for a in ns.artifact]
    try:  # before loading anything: the text is there
        _require_text(ns.text)
    except FileNotFoundError as exc:
        sys.stderr.write(f"edgellm eval: {exc}\n")
        return 2
    try:
        _require_artifacts([path for _, path in named])
        reference, why = (ns.reference, "") if ns.reference else reference_dir(named[0][1])
        if ns.no_fp:
            reference, why = None, "--no-fp"
        with progress_bar("eval", enabled=not ns.json) as progress:
            if ns.legacy:
                return _legacy(ns, named[0][1], reference, why, progress)
            result = _paired(ns, named, reference, progress)
    except (ValueError, FileNotFoundError) as exc:
        sys.stderr.write(f"edgellm eval: {exc}\n")
        return 2
    if ns.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    from edgellm.host.evaluate.paired_report import markdown

    sys.stdout.write(markdown(result) + "\n")
    if reference is None:
        sys.stdout.write(f"fp not scored ({why}): no Δ vs fp; pass --reference HF_DIR\n")
    return 0


def _paired(
    ns: argparse.Namespace, named: list[tuple[str, Path]], reference: Path | None, progress: Progress
) -> dict[str, Any]:
    from edgellm.host.evaluate.corpus import Slice
    from edgellm.host.evaluate.protocol import Model, Protocol, evaluate_models
    from edgellm.host.evaluate.tokenize import tokenizer_for

    protocol = Protocol(
        Slice(ns.slice, ns.tokens, ns.doc_tokens, ns.text), tuple(ns.paths), ns.context, ns.stride
    )
    models = [Model(name, "mnn", path) for name, path in named]
    if reference is not None:
        models.insert(0, Model("fp", "hf", reference))
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"artifact names must differ, got {names}: use NAME=DIR")
    baseline = ns.baseline or (named[0][0] if len(named) > 1 else None)
    if baseline is not None and baseline not in names:
        raise ValueError(f"--baseline {baseline!r} is none of {names}")
    docs = protocol.slice.documents(tokenizer_for(reference, named[0][1]))
    return evaluate_models(models, docs, protocol, "fp" if reference else None, baseline, progress)


def _legacy(
    ns: argparse.Namespace, artifact: Path, reference: Path | None, why: str, progress: Progress
) -> int:
    from edgellm.host.evaluate.artifact import evaluate_artifact
    from edgellm.host.evaluate.evaluate import EvalConfig

    cfg = EvalConfig(text_file=ns.text, tokens=ns.tokens, context=ns.context, stride=ns.stride)
    result = evaluate_artifact(artifact, cfg, reference, (8, 9, 10) if ns.kv else (), progress)
    if ns.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    _print_result(result, why)
    return 0


def _print_result(result: dict[str, Any], why: str) -> None:
    """The table, what was not measured and why, and the protocol behind the perplexity."""
    from edgellm.common.score_table import table
    from edgellm.host.evaluate.report import protocol

    sys.stdout.write(table(result["results"]) + "\n")
    mnn = "mnn = the artifact through MNN's prefill path"
    sys.stdout.write(f"perplexity over the {protocol(result)}; {mnn}\n")
    if result["reference"] is None:  # issue 12: top-1/KL printed as 0.0000 read as a measurement
        sys.stdout.write(f"top-1 and KL not measured: no fp reference ({why}); pass --reference HF_DIR\n")
    if "kv_cache" in result:
        sys.stdout.write("KV cache (each window decoded one token per forward):\n")
        sys.stdout.write(table(result["kv_cache"], ("ppl", "tokens")) + "\n")
    sys.stdout.write(f"size {result['size_bytes'] / 1e6:.1f} MB\n")
