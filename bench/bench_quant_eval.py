"""Quantization methods side by side under the paired evaluation (issue 19).

  python bench/bench_quant_eval.py build [--configs rtn-b64 awq-b64 gptq-b64 llmc-gptq-b64 ...] [--no-check]
  python bench/bench_quant_eval.py eval  [--slice dev|heldout] [--tokens 8192] [--configs ...] [--out F]
      [--jobs N] [--paths prefill decode]

``build`` makes every artifact once under ``<cache>/bench/`` (skipped when it exists): ours with
``edgellm quantize``'s code path (``builder.pipeline.build_artifact``), llmcompressor's (vLLM
project) in a venv of its own pins (``<cache>/bench/llmc-venv``, made here: torch 2.13.0 first so
pip takes the local CPU wheel, then llmcompressor 0.14.0.1 with transformers 5.17.0) on the *same*
calibration ids, its integers carried into MNN by the same builder (``quantize/reference_import.py``).
``eval`` scores fp and every artifact on one slice through the prefill and decode paths and prints
the markdown table with 95% paired intervals (vs fp, vs RTN). Per-token NLLs are cached under
``<cache>/eval``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgellm.common.paths import cache_dir
from edgellm.host.evaluate.runners import PATHS

ROOT = cache_dir() / "bench"  # artifacts shared with bench_quant.py (same names, same plans)
REF = ROOT / "ref"  # calibration ids and the reference runs' saved integers
VENV = cache_dir() / "bench" / "llmc-venv"
LLMC_PINS = ["llmcompressor==0.14.0.1", "transformers==5.17.0"]
# The table in docs/benchmarks.md. llmcompressor's AWQ runs at 32 calibration samples (its search
# forwards whole parent modules over every token: docs/quantization.md), so ours is there at 32 too.
CONFIGS = (
    "rtn-b64",
    "awq-b64",
    "awq-b64-duo",
    "gptq-b64",
    "gptq-b64-mse",
    "awq-b64-c32",
    "awq-b64-c32-duo",
    "llmc-awq-b64-c32",
    "llmc-gptq-b64",
)


def pairs_for(names: list[str]) -> tuple[tuple[str, str], ...]:
    """Paired differences reported besides vs fp/RTN: ours vs the reference, each variant vs its base."""
    out = []
    for n in names:
        if n.startswith("llmc-"):
            out += [(ours, n) for ours in (n[5:], n[5:] + "-duo") if ours in names]
        for suffix in ("-mse", "-duo"):
            if n.endswith(suffix) and n.removesuffix(suffix) in names:
                out.append((n, n.removesuffix(suffix)))
    return tuple(out)


def llmc_python() -> Path:
    """The reference venv's python, created on first use."""
    py = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    if stamp.is_file():
        return py
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)  # the local CPU wheel, never a CUDA resolve
    subprocess.run([*pip, *LLMC_PINS], check=True)
    stamp.write_text(" ".join(LLMC_PINS) + "\n")
    return py


def plan_for(name: str) -> Any:
    """``[llmc-]METHOD-bBLOCK[-cSAMPLES[xLEN]][-minmax|-mse][-duo]``: INT4 preset, calib 128 x 256 valid."""
    from edgellm.host.quantize.plan import Calibration, preset, with_calibration

    parts = name.removeprefix("llmc-").split("-")
    plan = preset("int4", method=parts[0], block=int(parts[1][1:]))
    for part in parts[2:]:
        if part in ("minmax", "mse"):  # the method's final block ranges: min..max or the MSE clip search
            plan = replace(plan, awq_grid=part) if plan.method == "awq" else replace(plan, gptq_grid=part)
        elif part == "duo":  # AWQ duo scaling (activations and weights), as llmcompressor
            plan = replace(plan, awq_duo=True)
        else:
            samples, _, length = part[1:].partition("x")
            plan = with_calibration(plan, Calibration(samples=int(samples), seq_len=int(length or 256)))
    return plan


def calibration_file(loaded: Any, plan: Any) -> Path:
    """The calibration ids our methods use with ``plan``, saved for the reference run."""
    import torch

    calib = plan.calibration
    file = REF / f"calib_ids_{calib.samples}{'' if calib.seq_len == 256 else f'x{calib.seq_len}'}.pt"
    if not file.is_file():
        file.parent.mkdir(parents=True, exist_ok=True)
        torch.save(loaded.calibration(plan), file)
    return file


def build(names: list[str], extra: dict[str, str], check: bool = True) -> None:
    """Build the artifacts that do not exist yet (``check``: with the build's quick check)."""
    import copy

    from edgellm.host.builder.loaded import LoadedModel
    from edgellm.host.builder.pipeline import Measure, Quantized, build_artifact
    from edgellm.host.evaluate.evaluate import EvalConfig
    from edgellm.host.quantize.reference_import import load_reference

    # The build's own evaluation is the legacy quick check; the figures come from `eval`.
    loaded = LoadedModel.open("default", EvalConfig(tokens=512))
    measure = Measure(evaluate=check)
    done = REF / "build.json"
    for name in names:
        out = ROOT / name
        if (out / "manifest.json").is_file():
            print(f"{name}: exists", flush=True)
            continue
        plan = plan_for(name)
        start = time.perf_counter()
        if name.startswith("llmc-"):
            saved = REF / f"{name}.pt"
            if not saved.is_file():
                cmd = [str(llmc_python()), str(Path(__file__).with_name("llmc_reference.py"))]
                cmd += ["--method", plan.method, "--model", str(loaded.hf_dir), "--block", str(plan.block)]
                cmd += ["--calib", str(calibration_file(loaded, plan))]
                cmd += ["--out", str(saved), *extra.get(name, "").split()]
                subprocess.run(cmd, check=True)
            qmodel = copy.deepcopy(loaded.model)
            qweights = load_reference(qmodel, saved, plan)
            meta = _meta(saved)
            quantized = Quantized(qmodel, qweights, seconds=meta["seconds"])
            built = build_artifact(loaded, plan, out, measure=measure, quantized=quantized)
            result = {**built.summary(), "reference": meta}
        else:
            result = build_artifact(loaded, plan, out, measure=measure).summary()
        result["wall_seconds"] = round(time.perf_counter() - start, 1)
        # Re-read before writing: another build process (ours vs the reference) may have added rows.
        results = json.loads(done.read_text()) if done.is_file() else {}
        results[name] = result
        done.write_text(json.dumps(results, indent=1, default=str))
        quantize_s = result["seconds"]["quantize"]
        print(f"{name}: built in {result['wall_seconds']:.0f} s (quantize {quantize_s:.0f} s)", flush=True)


def _meta(saved: Path) -> dict[str, Any]:
    import torch

    meta: dict[str, Any] = torch.load(saved, weights_only=False)["meta"]
    return meta


def evaluate(ns: argparse.Namespace) -> None:
    """Score fp and the artifacts (``--jobs`` processes of one MNN thread each); print the table."""
    names, slice_name, tokens, doc_tokens, out = ns.configs, ns.slice, ns.tokens, ns.doc_tokens, ns.out
    from edgellm.host.builder.source import checkpoint, resolve_source
    from edgellm.host.evaluate.corpus import Slice
    from edgellm.host.evaluate.paired_report import markdown
    from edgellm.host.evaluate.protocol import Model, Protocol, evaluate_models, score_model
    from edgellm.host.evaluate.tokenize import tokenizer_for
    from edgellm.host.progress_bar import progress_bar

    hf = checkpoint(resolve_source("default"))
    protocol = Protocol(Slice(slice_name, tokens, doc_tokens), tuple(ns.paths), threads=ns.threads)
    models = [Model("fp", "hf", hf)] + [Model(n, "mnn", ROOT / n) for n in names]
    docs = protocol.slice.documents(tokenizer_for(hf, ROOT / names[0]))
    start = time.perf_counter()
    if ns.only:  # one worker of --jobs: fill the cache for these models and stop
        for m in models:
            if m.name in ns.only:
                score_model(m, docs, protocol)
        return
    if ns.jobs > 1:
        _score_in_parallel(ns, [m.name for m in models])
    with progress_bar("eval") as progress:
        result = evaluate_models(
            models,
            docs,
            protocol,
            "fp",
            "rtn-b64" if "rtn-b64" in names else None,
            progress,
            pairs_for(names),
        )
    result["seconds"] = round(time.perf_counter() - start, 1)
    print(markdown(result))
    out = out or REF / f"eval-{slice_name}.json"
    out.write_text(json.dumps(result, indent=1))


def _score_in_parallel(ns: argparse.Namespace, names: list[str]) -> None:
    """Run ``--jobs`` worker processes (one thread each) until every model's scores are cached."""
    base = [sys.executable, __file__, "eval", "--slice", ns.slice, "--tokens", str(ns.tokens)]
    base += ["--doc-tokens", str(ns.doc_tokens), "--threads", "1", "--paths", *ns.paths]
    base += ["--configs", *ns.configs, "--only"]
    pending = list(names)
    running: list[subprocess.Popen[bytes]] = []
    while pending or running:
        while pending and len(running) < ns.jobs:
            running.append(subprocess.Popen([*base, pending.pop(0)]))
        time.sleep(1)
        for p in [p for p in running if p.poll() is not None]:
            running.remove(p)
            if p.returncode:
                raise SystemExit(f"worker {p.args!r} failed ({p.returncode})")


def main() -> None:
    """Parse and run."""
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=("build", "eval"))
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--slice", default="dev", choices=("dev", "heldout"))
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--doc-tokens", type=int, default=2048)
    ap.add_argument("--ref-args", nargs="*", default=[], help="NAME='--damp 0.01 ...' for llmc configs")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=1, help="eval: worker processes, one MNN thread each")
    ap.add_argument("--threads", type=int, default=None, help="eval: MNN threads (default the daemon's 2)")
    ap.add_argument(
        "--paths", nargs="+", default=list(PATHS), choices=PATHS, help="eval: scoring paths (default both)"
    )
    ap.add_argument("--only", nargs="*", default=None, help=argparse.SUPPRESS)
    # Why: the quick check (fp, torch and MNN ppl on 512 dev tokens) was a third of rtn-b64's build
    # wall time on the loaded machine (166 of 486 s), and no figure of this bench comes from it.
    ap.add_argument("--no-check", action="store_true", help="build: skip the build's quick check")
    ns = ap.parse_args()
    REF.mkdir(parents=True, exist_ok=True)  # also makes ROOT
    if ns.step == "build":
        build(ns.configs, dict(a.split("=", 1) for a in ns.ref_args), check=not ns.no_check)
    else:
        evaluate(ns)


if __name__ == "__main__":
    main()
