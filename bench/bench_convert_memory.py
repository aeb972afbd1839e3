"""Peak host memory of `edgellm convert` (process tree), against the checkpoint's fp16 size.

Runs `edgellm convert MODEL -o OUT --force` in a child process and samples the resident set of
the whole tree (the CLI and llmexport's child) every `--interval` seconds with psutil; also
reports `ru_maxrss` of the children (the largest single process, as the kernel counts it). The
issue-28 goal is a tree peak of at most 1.5x the fp16 checkpoint size. RSS sums count pages
shared by two processes (a memory-mapped shard) twice: an upper bound.

    python -m bench.bench_convert_memory --model default
    python -m bench.bench_convert_memory --build qwen2.5-0.5b --dir .cache/bench/qwen05   # then:
    python -m bench.bench_convert_memory --model .cache/bench/qwen05
    python -m bench.bench_convert_memory --model .cache/bench/qwen05 --quantize rtn   # edgellm quantize

`--build` writes a random-weight checkpoint at a real shape (bench/scale_shapes.py: bf16, sharded
safetensors, the model's own vocabulary size, the bundled SmolLM2 tokenizer), with no download.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.scale_shapes import GIB, SHAPES, build_checkpoint, fp16_bytes
from bench.scale_stages import run_sampled


def measure(
    model: str, out: Path, interval: float, extra: list[str], quantize: str | None = None
) -> dict[str, Any]:
    """Convert ``model`` once in a child process (``edgellm quantize --method`` when ``quantize``
    is set); the tree's peak RSS and wall time."""
    cli = [sys.executable, "-m", "edgellm.cli"]
    if quantize is None:
        cmd = [*cli, "convert", "--model", model, "-o", str(out), "--force"]
    else:  # quantize has no --force: ``out`` must not exist
        cmd = [*cli, "quantize", "--model", model, "--method", quantize, "--device", "cpu", "-o", str(out)]
    result = run_sampled([*cmd, *extra], interval=interval)
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    return result | {"max_single_child_rss": children}


def hf_dir_of(model: str) -> Path:
    """The HF checkpoint a convert of ``model`` reads (the dequantized cache for "default")."""
    if model != "default":
        return Path(model)
    from edgellm.host.builder.source import checkpoint, resolve_source

    return checkpoint(resolve_source("default"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="'default' or an HF checkpoint dir to convert")
    p.add_argument("--build", choices=sorted(SHAPES), help="write a random-weight checkpoint to --dir")
    p.add_argument("--dir", type=Path, help="where --build writes")
    p.add_argument("--out", type=Path, help="artifact dir (default: a temp dir)")
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--bits", default="4")
    p.add_argument(
        "--quantize", choices=("rtn", "gptq", "awq"), help="measure `edgellm quantize --method` instead"
    )
    ns = p.parse_args()
    if ns.build:
        if ns.dir is None:
            p.error("--build needs --dir")
        print(json.dumps({"built": str(build_checkpoint(ns.build, ns.dir))}))
        return
    if not ns.model:
        p.error("--model or --build")
    hf_dir = hf_dir_of(ns.model)
    with tempfile.TemporaryDirectory(prefix="edgellm-mem-") as tmp:
        out = ns.out or Path(tmp) / "artifact"
        result = measure(ns.model, out, ns.interval, ["--bits", ns.bits], ns.quantize)
    s = fp16_bytes(hf_dir)
    result |= {
        "model": ns.model,
        "fp16_bytes": s,
        "ratio_tree_peak_to_fp16": round(result["tree_peak_rss"] / s, 2),
        "ratio_single_child_to_fp16": round(result["max_single_child_rss"] / s, 2),
        "tree_peak_gib": round(result["tree_peak_rss"] / GIB, 2),
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
