"""Peak host memory of `edgellm convert` (process tree), against the checkpoint's fp16 size.

Runs `edgellm convert MODEL -o OUT --force` in a child process and samples the resident set of
the whole tree (the CLI and llmexport's child) every `--interval` seconds with psutil; also
reports `ru_maxrss` of the children (the largest single process, as the kernel counts it). The
issue-28 goal is a tree peak of at most 1.5x the fp16 checkpoint size. RSS sums count pages
shared by two processes (a memory-mapped shard) twice: an upper bound.

    python bench/bench_convert_memory.py --model default
    python bench/bench_convert_memory.py --build qwen2.5-0.5b --dir .cache/bench/qwen05   # then:
    python bench/bench_convert_memory.py --model .cache/bench/qwen05

`--build` writes a random-weight checkpoint at a real shape (bf16, sharded safetensors of
~200 MB, the bundled SmolLM2 tokenizer, so vocabulary 49,152), with no download.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs in the venv

GIB = 1024**3
# Real shapes (config.json of each model), vocabulary cut to the SmolLM2 tokenizer's.
SHAPES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "qwen2.5-0.5b": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        },
    ),
    "llama-3.2-1b": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": True,
            "rope_parameters": {
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
                "rope_theta": 500000.0,
            },
        },
    ),
}


def build_checkpoint(shape: str, out: Path, dtype: str = "bfloat16", shard: str = "200MB") -> Path:
    """Save a random-weight checkpoint of ``shape`` into ``out`` (sharded safetensors + tokenizer)."""
    import torch
    import transformers

    from edgellm.host.builder.source import checkpoint, resolve_source

    config_class, model_class, fields = SHAPES[shape]
    tok_dir = checkpoint(resolve_source("default"))
    config = getattr(transformers, config_class)(
        vocab_size=49152, bos_token_id=1, eos_token_id=2, pad_token_id=0, **fields
    )
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).to(getattr(torch, dtype))
    model.save_pretrained(str(out), max_shard_size=shard)
    transformers.AutoTokenizer.from_pretrained(str(tok_dir)).save_pretrained(str(out))
    return out


def fp16_bytes(hf_dir: Path) -> int:
    """The checkpoint's size at 2 bytes per parameter, read from the safetensors headers only."""
    total = 0
    for path in sorted(hf_dir.glob("*.safetensors")):
        with path.open("rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, info in header.items():
            if name != "__metadata__":
                numel = 1
                for d in info["shape"]:
                    numel *= d
                total += 2 * numel
    return total


STAGES = ("load", "quantize", "export", "verify", "evaluate", "done")
_STAGE = re.compile(r"\b(" + "|".join(STAGES) + r"): ")


class TreeSampler:
    """Polls the RSS of a process and its descendants; keeps the peak, overall and per stage.

    The stage is the last one the CLI's progress bar named (``export: ...``); per stage it keeps
    the tree's peak and each process's (the CLI is ``main``, a child by its script's name).
    """

    def __init__(self, pid: int, interval: float) -> None:
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self.peak_procs = 0
        self.stage = "start"
        self.stages: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def saw(self, text: str) -> None:
        """Move to the last stage named in ``text`` (a chunk of the CLI's output)."""
        found = _STAGE.findall(text)
        if found:
            self.stage = found[-1]

    def _sample(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        rss, per = 0, dict[str, int]()
        for p in procs:
            try:
                r = p.memory_info().rss
                name = "main" if p.pid == self.root.pid else _proc_name(p)
            except psutil.NoSuchProcess:
                continue
            rss += r
            per[name] = per.get(name, 0) + r
        if rss > self.peak:
            self.peak, self.peak_procs = rss, len(procs)
        stage = self.stages.setdefault(self.stage, {})
        for name, r in (("tree", rss), *per.items()):
            stage[name] = max(stage.get(name, 0), r)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()


def _proc_name(p: Any) -> str:
    """A child's name: its script (``_llmexport_runner.py``) or module (``-m x``), else its exe."""
    cmd = p.cmdline()
    for i, arg in enumerate(cmd[1:], 1):
        if arg == "-m" and i + 1 < len(cmd):
            return str(cmd[i + 1])
        if arg.endswith(".py"):
            return Path(arg).name
    return Path(cmd[0]).name if cmd else "?"


def _read(stream: Any, sampler: TreeSampler, chunks: list[str]) -> None:
    """Feed the child's output to ``sampler`` as it arrives (tqdm redraws with ``\\r``)."""
    for chunk in iter(lambda: stream.read(256), ""):
        chunks.append(chunk)
        sampler.saw("".join(chunks[-2:]))


def measure(model: str, out: Path, interval: float, extra: list[str]) -> dict[str, Any]:
    """Convert ``model`` once in a child process; the tree's peak RSS and wall time."""
    cmd = [sys.executable, "-m", "edgellm.cli", "convert", "--model", model, "-o", str(out), "--force"]
    cmd += extra
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    chunks: list[str] = []
    with TreeSampler(proc.pid, interval) as sampler:
        reader = threading.Thread(target=_read, args=(proc.stdout, sampler, chunks), daemon=True)
        reader.start()
        proc.wait()
        reader.join()
    output = "".join(chunks)
    wall = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    return {
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "tree_peak_rss": sampler.peak,
        "tree_procs_at_peak": sampler.peak_procs,
        "max_single_child_rss": children,
        "stages_gib": {k: {n: round(r / GIB, 2) for n, r in v.items()} for k, v in sampler.stages.items()},
        "tail": output[-2000:] if proc.returncode else "",
    }


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
        result = measure(ns.model, out, ns.interval, ["--bits", ns.bits])
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
