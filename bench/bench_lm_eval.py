"""A multiple-choice task scored through the gateway as lm-evaluation-harness does, and on torch.

lm-evaluation-harness is not a dependency (it pins its own torch, datasets and transformers); this
bench reproduces exactly what its `local-completions` model does for a loglikelihood task, so the
gateway's numbers can be compared without it (docs/gateway.md has the `lm_eval` command itself):
- each (context, choice) pair is tokenized with the checkpoint's Hugging Face tokenizer as
  lm_eval's `_encode_pair` does (trailing context spaces move to the continuation, no special
  tokens), and sent as token ids: `{"prompt": [ids...], "max_tokens": 1, "logprobs": 1,
  "echo": true, "temperature": 0, "seed": 1234}`; the choice's loglikelihood is
  `sum(token_logprobs[ctxlen:-1])` (lm_eval's `parse_logprobs`), acc = its argmax == label;
- `torch`: the artifact's fp Hugging Face checkpoint (`--model hf` in lm_eval): the same token ids
  through `AutoModelForCausalLM`, the continuation's log-softmax summed.
Both accuracies are reported with lm_eval's standard error (sample std / sqrt(n)).

Usage: python -m bench.bench_lm_eval --artifact .cache/artifacts/default [--hf-dir DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; types-PyYAML is not a dependency

from bench.servers import daemon_and_gateway

TASK = Path(__file__).parent / "lm_eval_task" / "facts.yaml"
Pair = tuple[list[int], list[int]]  # (context ids, continuation ids)


def load_task(path: Path) -> tuple[list[dict[str, Any]], str]:
    """The task's documents and its target delimiter (the yaml's data_files are relative to the repo root)."""
    spec = yaml.safe_load(path.read_text())
    data = Path(__file__).parents[1] / spec["dataset_kwargs"]["data_files"]["test"]
    docs = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    return docs, spec.get("target_delimiter", " ")


def encode_pair(tok: Any, context: str, continuation: str) -> Pair:
    """lm_eval's `_encode_pair`: trailing spaces of the context go to the continuation."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation, context = context[-spaces:] + continuation, context[:-spaces]
    whole = tok.encode(context + continuation, add_special_tokens=False)
    ctx = tok.encode(context, add_special_tokens=False)
    return ctx, whole[len(ctx) :]


def gateway_scores(url: str, model: str, pairs: list[Pair]) -> list[float]:
    """Each pair's loglikelihood through /v1/completions, as local-completions asks and parses it."""
    out = []
    with httpx.Client(base_url=url, timeout=120) as http:
        for ctx, cont in pairs:
            body = {"model": model, "prompt": [ctx + cont], "temperature": 0, "max_tokens": 1,
                    "logprobs": 1, "seed": 1234, "echo": True}  # fmt: skip
            reply = http.post("/v1/completions", json=body)
            reply.raise_for_status()
            lp = reply.json()["choices"][0]["logprobs"]
            out.append(sum(lp["token_logprobs"][len(ctx) : -1]))
    return out


def torch_scores(hf_dir: Path, pairs: list[Pair]) -> list[float]:
    """Each pair's loglikelihood on the fp checkpoint (lm_eval's `hf` model: one forward per pair)."""
    import torch
    from transformers import AutoModelForCausalLM

    from edgellm.common.mnn_llm import host_threads

    # Why capped: torch's default pool (every core) thrashes on a shared machine (~1.2 s a forward).
    torch.set_num_threads(host_threads())
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model.eval()  # type: ignore[no-untyped-call]
    out = []
    with torch.inference_mode():
        for ctx, cont in pairs:
            ids = torch.tensor([ctx + cont])
            logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)  # [T, V]
            # The logits at position i predict token i + 1.
            rows = logp[len(ctx) - 1 : len(ctx) + len(cont) - 1]
            out.append(float(rows[torch.arange(len(cont)), torch.tensor(cont)].sum()))
    return out


def chosen(docs: list[dict[str, Any]], scores: list[float]) -> list[int]:
    """Each document's answer: the choice with the highest loglikelihood (scores: every choice, in order)."""
    out, at = [], 0
    for doc in docs:
        n = len(doc["choices"])
        out.append(max(range(n), key=lambda i: scores[at + i]))
        at += n
    return out


def accuracy(docs: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
    """acc and its standard error (lm_eval's mean_stderr: sample std / sqrt(n)) from per-choice scores."""
    hits = [1.0 if c == d["label"] else 0.0 for c, d in zip(chosen(docs, scores), docs, strict=True)]
    acc = sum(hits) / len(hits)
    var = sum((h - acc) ** 2 for h in hits) / (len(hits) - 1)
    return {"acc": round(acc, 4), "acc_stderr": round(math.sqrt(var / len(hits)), 4)}


def main() -> None:
    """Score the task both ways; print (and optionally save) both accuracies."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--hf-dir", type=Path, help="the fp checkpoint (default: the default model's)")
    ap.add_argument("--task", type=Path, default=TASK)
    ap.add_argument("--out", type=Path)
    ns = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the servers
    from transformers import AutoTokenizer

    from edgellm.host.builder.source import checkpoint, resolve_source

    hf_dir = ns.hf_dir or checkpoint(resolve_source("default"))
    tok = AutoTokenizer.from_pretrained(hf_dir)
    docs, delimiter = load_task(ns.task)
    pairs = [encode_pair(tok, d["context"], delimiter + c) for d in docs for c in d["choices"]]
    with daemon_and_gateway(ns.artifact) as (_, base):
        start = time.perf_counter()
        gw = gateway_scores(base, "", pairs)
        gw_s = time.perf_counter() - start
    start = time.perf_counter()
    ref = torch_scores(Path(hf_dir), pairs)
    ref_s = time.perf_counter() - start
    agree = sum(a == b for a, b in zip(chosen(docs, gw), chosen(docs, ref), strict=True))
    diff = sum(abs(a - b) for a, b in zip(gw, ref, strict=True)) / len(gw)
    result = {
        "task": ns.task.name, "docs": len(docs), "requests": len(pairs),
        "gateway": {**accuracy(docs, gw), "seconds": round(gw_s, 1)},
        "torch": {**accuracy(docs, ref), "seconds": round(ref_s, 1)},
        "same_choice": agree,
        "mean_abs_loglikelihood_diff": round(diff, 4),
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if ns.out:
        ns.out.write_text(json.dumps({"summary": result, "gateway": gw, "torch": ref}, indent=1))


if __name__ == "__main__":
    main()
