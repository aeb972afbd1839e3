"""Scale, measured (issue 28): edgellm vs llama.cpp on random-weight checkpoints at real model shapes.

Per shape (bench/scale_shapes.py), each stage timed and written to its own JSON under
WORK/<shape>/results/ (a stage whose JSON exists with rc 0 is skipped unless --force, so a run
can be stopped and resumed):
  build    bf16 sharded safetensors checkpoint, the bundled SmolLM2 tokenizer (vocabulary padded)
  convert  `edgellm convert` (default preset: RTN INT4): wall, process-tree peak RSS, artifact size
  gptq     `edgellm quantize --method gptq` (INT4) at --calib-samples x --calib-len (labelled)
  gguf     llama.cpp's convert_hf_to_gguf.py -> f16, its quantizer -> Q4_0: wall, peak RSS, size
  serve    per --threads: an `edgellm daemon` and a llama-cpp-python child, interleaved
           (bench/scale_serve.py): RSS after load, peak RSS, prefill tok/s (~1,500-token prompt),
           decode tok/s (128 tokens), ratios edgellm / llama.cpp
Then a summary (markdown + JSON, one row per shape, unmeasured shapes extrapolated per parameter
and labelled so) and, with --fit, the facts for docs/models.md (RSS after load, artifact size,
KV bytes per token at 2k/8k).

    python -m bench.bench_scale --shapes qwen2.5-0.5b
    python -m bench.bench_scale --shapes qwen2.5-0.5b,llama-3.2-1b --stages serve --threads 2 --force
    python -m bench.bench_scale --stages summary --fit --out bench/results/scale-DATE.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scale_report import fit_facts, markdown, summary
from bench.scale_shapes import SHAPES
from bench.scale_stages import Paths, stage_build, stage_convert, stage_gguf, stage_gptq

STAGES = ("build", "convert", "gptq", "gguf", "serve")
WORK = Path(".cache/scale")  # relative to the checkout
LLAMA_SRC = Path(".cache/bench-venvs/src/llama_cpp_python-0.3.36/vendor/llama.cpp")
LLAMA_PYTHON = Path(".cache/bench-venvs/llama-cpp/bin/python")
NEEDS = {"convert": "hf", "gptq": "hf", "gguf": "hf"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated: {', '.join(SHAPES)}")
    ap.add_argument("--stages", default=",".join((*STAGES, "summary")), help="comma-separated stages")
    ap.add_argument(
        "--work", type=Path, default=WORK, help="per-shape files and results (default %(default)s)"
    )
    ap.add_argument("--force", action="store_true", help="rerun stages whose result JSON exists")
    ap.add_argument("--threads", default="1,2", help="serving thread counts (default %(default)s)")
    ap.add_argument("--reps", type=int, default=2, help="interleaved serving rounds per thread count")
    ap.add_argument("--prompt-tokens", type=int, default=1500)
    ap.add_argument(
        "--calib-samples", type=int, default=16, help="GPTQ calibration samples (quantize's default: 128)"
    )
    ap.add_argument("--calib-len", type=int, default=256, help="tokens per calibration sample")
    ap.add_argument("--eval-tokens", type=int, default=512, help="quantize's perplexity tokens")
    ap.add_argument(
        "--llama-src", type=Path, default=LLAMA_SRC, help="llama.cpp source (convert_hf_to_gguf.py)"
    )
    ap.add_argument("--llama-python", type=Path, default=LLAMA_PYTHON, help="python with llama-cpp-python")
    ap.add_argument(
        "--keep-f16", action="store_true", help="keep the f16 GGUF (deleted after Q4_0 by default)"
    )
    ap.add_argument("--out", type=Path, help="summary JSON (the markdown goes next to it, .md)")
    ap.add_argument(
        "--fit", action="store_true", help="also write the per-shape memory/KV facts (<out>-fit.json)"
    )
    return ap.parse_args(argv)


def result_path(ns: argparse.Namespace, shape: str, stage: str) -> Path:
    """Where one stage's JSON goes."""
    return Path(ns.work) / shape / "results" / f"{stage}.json"


def done(path: Path) -> bool:
    """Whether a stage already succeeded."""
    return path.exists() and json.loads(path.read_text()).get("rc") == 0


def run_stage(ns: argparse.Namespace, shape: str, stage: str, fn: Callable[[], dict[str, Any]]) -> None:
    """Run FN unless its JSON says it succeeded; write what it returns (with context) either way."""
    path = result_path(ns, shape, stage)
    if done(path) and not ns.force:
        print(f"[{shape}] {stage}: done before ({path})", file=sys.stderr)
        return
    print(f"[{shape}] {stage}: running", file=sys.stderr)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    try:
        result = fn()
    except Exception as err:  # noqa: BLE001 - one failed stage is recorded; the next shapes still run
        result = {"rc": 1, "error": f"{type(err).__name__}: {err}"}
    result |= {"shape": shape, "stage": stage, "started": started, "load_average": _load(), "argv": sys.argv}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"[{shape}] {stage}: rc {result.get('rc')} in {result.get('wall_s', '?')} s", file=sys.stderr)


def _load() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()]


def serve_stage(ns: argparse.Namespace, shape: str, paths: Paths, threads: int) -> dict[str, Any]:
    """Both engines at THREADS on this shape's RTN artifact and Q4_0 GGUF."""
    from bench.scale_serve import serve_both, workload

    need = (paths.rtn / "manifest.json", paths.q4_0, ns.llama_python)
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        return {
            "rc": 2,
            "error": f"missing {', '.join(missing)}: run the convert and gguf stages, build the llama venv",
        }
    manifest = json.loads((paths.rtn / "manifest.json").read_text())
    stops = [int(t) for t in manifest["tokenizer"]["stop_token_ids"]]
    w = workload(paths.hf, ns.prompt_tokens, stops, nonce=threads)
    result = serve_both(paths.rtn, paths.q4_0, ns.llama_python, threads, w, ns.reps)
    return {"rc": 0, "prompt_tokens": len(w.long_ids), "short_prompt_tokens": len(w.short_ids)} | result


def shape_stages(ns: argparse.Namespace, shape: str, stages: list[str]) -> None:
    """The chosen stages of one shape, in order; one missing input stops that stage only."""
    paths = Paths(ns.work / shape)
    jobs: dict[str, Callable[[], dict[str, Any]]] = {
        "build": lambda: stage_build(shape, paths),
        "convert": lambda: stage_convert(paths),
        "gptq": lambda: stage_gptq(paths, ns.calib_samples, ns.calib_len, ns.eval_tokens),
        "gguf": lambda: _gguf(ns, paths),
    }
    for stage in stages:
        if stage in NEEDS and not (paths.hf / "config.json").exists():
            print(f"[{shape}] {stage}: no checkpoint (run --stages build)", file=sys.stderr)
        elif stage in jobs:
            run_stage(ns, shape, stage, jobs[stage])
        elif stage == "serve":
            for t in _threads(ns):
                run_stage(ns, shape, f"serve_t{t}", lambda t=t: serve_stage(ns, shape, paths, t))  # type: ignore[misc]


def _gguf(ns: argparse.Namespace, paths: Paths) -> dict[str, Any]:
    result = stage_gguf(paths, ns.llama_src, ns.llama_python, threads=max(_threads(ns)))
    if result["rc"] == 0 and not ns.keep_f16:
        paths.f16.unlink()  # 2 bytes per parameter on shared scratch; Q4_0 is what serves
    return result


def _threads(ns: argparse.Namespace) -> list[int]:
    return [int(t) for t in ns.threads.split(",")]


def write_summary(ns: argparse.Namespace, shapes: list[str]) -> None:
    """The summary JSON + markdown (and the fit facts) at --out, or on stdout."""
    command = shlex.join(["python", "-m", "bench.bench_scale", *sys.argv[1:]])
    rows = summary(ns.work, shapes)
    doc: dict[str, Any] = {"command": command, "load_average": _load(), "rows": rows}
    table = markdown(rows, command) if rows else "no measured shape yet\n"
    if ns.fit:
        doc["fit"] = fit_facts(ns.work, shapes)
    if ns.out is None:
        print(table)
        print(json.dumps(doc, indent=1))
        return
    ns.out.write_text(json.dumps(doc, indent=1))
    ns.out.with_suffix(".md").write_text(table)


def main(argv: list[str] | None = None) -> int:
    """Run the stages for every shape, then the summary."""
    ns = parse(argv)
    shapes = [s for s in ns.shapes.split(",") if s]
    stages = [s for s in ns.stages.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES] + [s for s in stages if s not in (*STAGES, "summary")]
    if unknown:
        raise SystemExit(f"unknown shape or stage: {', '.join(unknown)}")
    for shape in shapes:
        shape_stages(ns, shape, stages)
    if "summary" in stages:
        write_summary(ns, shapes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
