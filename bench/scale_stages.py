"""Host stages of bench_scale: checkpoint, edgellm convert/quantize, llama.cpp GGUF + Q4_0; timed, peak RSS.

Each stage runs as a child process under a TreeSampler (the summed RSS of the process tree: the
CLI and llmexport's child, or llama.cpp's converter) and returns a JSON-able dict.
"""

from __future__ import annotations

import codecs
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.scale_shapes import GIB, TreeSampler, fp16_bytes

# Q4_0 through llama-cpp-python's ctypes API: llama_model_quantize(in, out, params).
QUANTIZE_Q4_0 = """
import ctypes, sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
p.nthread = int(sys.argv[3])
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))
"""


@dataclass(frozen=True)
class Paths:
    """Where one shape's files live under the work directory."""

    root: Path

    @property
    def hf(self) -> Path:
        """The bf16 checkpoint."""
        return self.root / "hf"

    @property
    def rtn(self) -> Path:
        """`edgellm convert` (default preset, RTN INT4)."""
        return self.root / "rtn"

    @property
    def gptq(self) -> Path:
        """`edgellm quantize --method gptq`."""
        return self.root / "gptq"

    @property
    def f16(self) -> Path:
        """llama.cpp's f16 GGUF."""
        return self.root / "model-f16.gguf"

    @property
    def q4_0(self) -> Path:
        """llama.cpp's Q4_0 GGUF."""
        return self.root / "model-q4_0.gguf"


def size_of(path: Path) -> int:
    """Bytes of a file, or of every file under a directory."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_sampled(cmd: list[str], env: dict[str, str] | None = None, interval: float = 0.2) -> dict[str, Any]:
    """Run CMD once; wall time, the process tree's peak RSS, the output's tail when it failed."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    chunks: list[str] = []
    with TreeSampler(proc.pid, interval) as sampler:
        reader = threading.Thread(target=_read, args=(proc.stdout, sampler, chunks), daemon=True)
        reader.start()
        proc.wait()
        reader.join()
    output = "".join(chunks)
    return {
        "rc": proc.returncode,
        "wall_s": round(time.perf_counter() - start, 1),
        "tree_peak_rss": sampler.peak,
        "tree_procs_at_peak": sampler.peak_procs,
        "stages_gib": {k: {n: round(r / GIB, 2) for n, r in v.items()} for k, v in sampler.stages.items()},
        "tail": output[-3000:] if proc.returncode else "",
    }


def _read(stream: Any, sampler: TreeSampler, chunks: list[str]) -> None:
    """Feed the child's output to ``sampler`` as it arrives (tqdm redraws with ``\\r``).

    Why ``read1``: a text stream's ``read(n)`` waits for n characters, so a progress line (~100
    characters, no newline) reached the sampler only with the next output: the gate's peak, minutes
    into "verify:", was booked under "export:" (Gemma-2-2B, 2026-12-06). ``read1`` returns what
    the pipe holds now.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for raw in iter(lambda: stream.read1(4096), b""):
        chunks.append(decoder.decode(raw))
        sampler.saw("".join(chunks[-2:]))


def stage_build(shape: str, paths: Paths) -> dict[str, Any]:
    """Write the random-weight checkpoint (replacing a partial one), in a child process."""
    shutil.rmtree(paths.hf, ignore_errors=True)
    result = run_sampled([sys.executable, "-m", "bench.scale_shapes", shape, str(paths.hf)])
    return result | ({"fp16_bytes": fp16_bytes(paths.hf)} if result["rc"] == 0 else {})


def edgellm_cmd(*args: str) -> list[str]:
    """The edgellm CLI in this interpreter."""
    return [sys.executable, "-m", "edgellm.cli", *args]


def stage_convert(paths: Paths) -> dict[str, Any]:
    """`edgellm convert` with its default preset (RTN INT4, lm_head INT8)."""
    result = run_sampled(edgellm_cmd("convert", "--model", str(paths.hf), "-o", str(paths.rtn), "--force"))
    return result | _sizes(paths.rtn, paths.hf, result)


def stage_gptq(paths: Paths, calib_samples: int, calib_len: int, eval_tokens: int) -> dict[str, Any]:
    """`edgellm quantize --method gptq` (INT4) at the given calibration; its label says which."""
    shutil.rmtree(paths.gptq, ignore_errors=True)  # quantize has no --force
    cmd = edgellm_cmd("quantize", "--model", str(paths.hf), "--method", "gptq", "--bits", "4")
    cmd += ["--calib-samples", str(calib_samples), "--calib-len", str(calib_len)]
    cmd += ["--tokens", str(eval_tokens), "-o", str(paths.gptq)]
    result = run_sampled(cmd)
    calibration = f"{calib_samples} x {calib_len} tokens of wikitext2-valid"
    return result | _sizes(paths.gptq, paths.hf, result) | {"calibration": calibration}


def _sizes(artifact: Path, hf: Path, result: dict[str, Any]) -> dict[str, Any]:
    """Artifact size and the peak's ratio to the fp16 checkpoint (the issue's 1.5x goal)."""
    fp16 = fp16_bytes(hf)
    out: dict[str, Any] = {
        "fp16_bytes": fp16,
        "ratio_tree_peak_to_fp16": round(result["tree_peak_rss"] / fp16, 2),
    }
    if result["rc"] == 0:
        out["artifact_bytes"] = size_of(artifact)
    return out


def stage_gguf(paths: Paths, llama_src: Path, llama_python: Path, threads: int) -> dict[str, Any]:
    """llama.cpp's own convert_hf_to_gguf.py to f16, then its quantizer to Q4_0."""
    wrapper = str(Path(__file__).with_name("scale_gguf_convert.py"))  # SmolLM2's pre-tokenizer name
    cmd = [
        sys.executable,
        wrapper,
        str(llama_src),
        str(paths.hf),
        "--outtype",
        "f16",
        "--outfile",
        str(paths.f16),
    ]
    convert = run_sampled(cmd)
    out: dict[str, Any] = {"rc": convert["rc"], "convert_f16": convert}
    if convert["rc"] != 0:
        return out
    convert["gguf_bytes"] = size_of(paths.f16)
    quant = run_sampled(
        [str(llama_python), "-c", QUANTIZE_Q4_0, str(paths.f16), str(paths.q4_0), str(threads)]
    )
    if quant["rc"] == 0:
        quant["gguf_bytes"] = size_of(paths.q4_0)
    return out | {"rc": quant["rc"], "quantize_q4_0": quant, "wall_s": convert["wall_s"] + quant["wall_s"]}
