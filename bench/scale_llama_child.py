"""llama.cpp side of bench_scale: one GGUF loaded in llama-cpp-python, driven by JSON lines on stdin.

Runs under the llama-cpp-python venv's interpreter (no edgellm there): stdlib, numpy, llama_cpp.
Greedy on raw token ids (the parent renders the chat template with the checkpoint's tokenizer), the
stop ids banned so every decode runs its full length. Timings are taken around `Llama.eval`, the
engine side, as the daemon's own stats are on the edgellm side.

    python scale_llama_child.py MODEL.gguf N_CTX THREADS   # then {"op": ...} lines on stdin
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import llama_cpp  # type: ignore[import-not-found]  # only in the bench venv
import numpy as np
from llama_cpp import Llama


def greedy(llm: Llama, ban: list[int]) -> int:
    """The argmax of the last evaluated position, with BAN excluded."""
    # Why the C API: without logits_all, Llama.eval no longer copies logits into `llm.scores`
    # (0.3.x samples inside llama.cpp), so that array holds zeros; read the context's last row.
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    row = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()
    row[ban] = -np.inf
    return int(np.argmax(row))


def decode(llm: Llama, n: int, ban: list[int]) -> float:
    """Decode N tokens greedily; tokens per second."""
    t0 = time.perf_counter()
    for _ in range(n):
        llm.eval([greedy(llm, ban)])
    return n / (time.perf_counter() - t0)


def prefill(llm: Llama, ids: list[int]) -> float:
    """Evaluate IDS from an empty context; tokens per second."""
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    return len(ids) / (time.perf_counter() - t0)


def handle(llm: Llama, cmd: dict[str, Any]) -> dict[str, Any]:
    """One request: a short-prompt decode, or the 2,048-position conversation (its prefill timed)."""
    ban = [int(t) for t in cmd.get("ban", [])]
    if cmd["op"] == "decode":
        prefill(llm, cmd["ids"])
        return {"decode_tps": decode(llm, int(cmd["n"]), ban)}
    tps = prefill(llm, cmd["ids"])
    long_decode = decode(llm, int(cmd["n1"]), ban)
    llm.eval(cmd["more"])
    decode(llm, int(cmd["n2"]), ban)
    return {"prefill_tps": tps, "decode_tps_at_context": long_decode, "positions": llm.n_tokens}


def main() -> int:
    """Load, report, then answer one JSON line per command line."""
    path, n_ctx, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    t0 = time.perf_counter()
    llm = Llama(
        model_path=path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False
    )
    print(json.dumps({"load_s": time.perf_counter() - t0, "n_vocab": llm.n_vocab()}), flush=True)
    for line in sys.stdin:
        print(json.dumps(handle(llm, json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
