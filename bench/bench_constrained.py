"""Schema-constrained output with the real model: validity over sampled answers, and the mask's cost.

For each split (tuning: the five schemas the prompt was written against; held_out: five more that
nothing was tuned on) it samples `--samples` answers per schema at temperature 0.8 through a real
daemon over gRPC (in this process, port 0), parses each with `json` and validates it with
`jsonschema`. Then it measures the mask cost per token: each answer's tokens are replayed through
a fresh `TokenGuide` (the daemon's own code: llguidance computes the bitmask, numpy applies it to
a [vocab] logits row), timing every step. The daemon's own total (`GenerateStats.constraint_ms`)
is reported beside it as a per-token mean.

Usage: python bench/bench_constrained.py --artifact .cache/artifacts/default [--samples 10] [--out F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from bench.constrained_cases import TEMPERATURE, Answer, Case, ask, cases
from edgellm.device.artifact import open_artifact
from edgellm.device.config import DaemonConfig
from edgellm.device.constrain import Constraint, ConstraintKind, TokenGuide
from edgellm.device.constrain.library import TokenizerCache
from edgellm.device.rpc.server import start_server
from edgellm.v1 import device_pb2, device_pb2_grpc


def verdict(case: Case, answer: Answer) -> str:
    """'ok', or why the answer fails."""
    try:
        case.check(answer.text)
    except Exception as err:  # noqa: BLE001 - any failure is a finding to report
        return f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    return "ok"


def replay_mask_us(
    artifact: Path, case: Case, answers: list[Answer], tokenizers: TokenizerCache
) -> list[float]:
    """Per-token mask cost (µs) of each answer's tokens through a fresh guide."""
    art = open_artifact(artifact)
    logits = np.zeros(art.manifest.model.vocab_size, dtype=np.float32)
    out: list[float] = []
    for answer in answers:
        guide = TokenGuide.start(Constraint(ConstraintKind.JSON_SCHEMA, case.schema_text), art, tokenizers)
        for token in answer.token_ids:
            guide.mask(logits)
            guide.advance(token)
        out += [s * 1e6 for s in guide.mask_seconds]
    return out


async def run(artifact: Path, samples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        daemon = await start_server(DaemonConfig(port=0, model=artifact, data_dir=Path(data)))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as channel:
                stub = device_pb2_grpc.DeviceDaemonStub(channel)
                report: dict[str, Any] = {"temperature": TEMPERATURE, "samples_per_schema": samples}
                tokenizers = TokenizerCache()
                for split in ("tuning", "held_out"):
                    report[split] = await run_split(stub, artifact, split, samples, tokenizers)
        finally:
            await daemon.stop(0)
    return report


async def run_split(
    stub: Any, artifact: Path, split: str, samples: int, tokenizers: TokenizerCache
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    all_us: list[float] = []
    failures: list[dict[str, Any]] = []
    live_ms = live_tokens = 0.0
    start = time.perf_counter()
    for case in cases(split):
        answers = [await ask(stub, case, seed) for seed in range(samples)]
        verdicts = [verdict(case, a) for a in answers]
        failures += [
            {"case": case.name, "seed": a.seed, "why": v, "text": a.text[:200]}
            for a, v in zip(answers, verdicts, strict=True)
            if v != "ok"
        ]
        us = replay_mask_us(artifact, case, answers, tokenizers)
        all_us += us
        live_ms += sum(a.constraint_ms for a in answers)
        live_tokens += sum(a.completion_tokens for a in answers)
        rows.append(
            {
                "case": case.name,
                "valid": verdicts.count("ok"),
                "answers": len(answers),
                "stopped_by_grammar": sum(a.finish_reason == device_pb2.FINISH_REASON_STOP for a in answers),
                "mean_tokens": round(statistics.mean(a.completion_tokens for a in answers), 1),
                "decode_tok_s": round(statistics.median(a.decode_tokens_per_second for a in answers), 1),
                "mask_us_p50": round(float(np.median(us)), 1),
                "mask_us_p99": round(float(np.percentile(us, 99)), 1),
                "example": answers[0].text,
            }
        )
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "example"}), file=sys.stderr)
    valid = sum(r["valid"] for r in rows)
    total = sum(r["answers"] for r in rows)
    return {
        "valid": valid,
        "answers": total,
        "mask_us_p50": round(float(np.median(all_us)), 1),
        "mask_us_p99": round(float(np.percentile(all_us, 99)), 1),
        "mask_us_max": round(float(np.max(all_us)), 1),
        "masked_tokens": len(all_us),
        "live_mask_us_mean": round(1000 * live_ms / max(live_tokens, 1), 1),
        "seconds": round(time.perf_counter() - start, 1),
        "cases": rows,
        "failures": failures,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, default=Path(".cache/artifacts/default"))
    ap.add_argument("--samples", type=int, default=10, help="answers per schema (5 schemas per split)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    ns = ap.parse_args()
    report = asyncio.run(run(ns.artifact, ns.samples))
    text = json.dumps(report, indent=2)
    print(text)
    if ns.out:
        ns.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
