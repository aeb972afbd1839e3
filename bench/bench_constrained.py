"""Schema-constrained output with the real model: validity over sampled answers, and the mask's cost.

For each split (tuning: the five schemas the prompt was written against; held_out: five more that
nothing was tuned on) it samples `--samples` answers per schema at temperature 0.8 through a real
daemon over gRPC (in this process, port 0), parses each with `json` and validates it with
`jsonschema`. Then it measures the mask cost per token: each answer's tokens are replayed through
a fresh `TokenGuide` (the daemon's own code: llguidance computes the bitmask, numpy applies it to
a [vocab] logits row), timing every step. The daemon's own total (`GenerateStats.constraint_ms`)
is reported beside it as a per-token mean.

`--mask-only --repeats N` measures the mask alone, without the model: each schema is walked by
argmax over random logits (a fixed seed) until the grammar completes, the walk is replayed N times,
and each position keeps its fastest run, so time slices lost to other processes on a loaded
machine drop out (the raw figures are printed beside).

Usage: python -m bench.bench_constrained --artifact .cache/artifacts/default [--samples 10] [--out F]
       python -m bench.bench_constrained --artifact .cache/artifacts/default --mask-only [--repeats 15]
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

import numpy as np

from bench.constrained_cases import TEMPERATURE, Answer, Case, ask, cases
from edgellm.common.channel import ChannelSecurity, open_aio_channel
from edgellm.device.config import DaemonConfig
from edgellm.device.constrain import Constraint, ConstraintKind, TokenGuide
from edgellm.device.constrain.library import TokenizerCache
from edgellm.device.rpc.server import start_server
from edgellm.engine.artifact import open_artifact
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
        daemon = await start_server(DaemonConfig.of(port=0, model=artifact, data_dir=Path(data)))
        try:
            # The daemon requires its token even on loopback (docs/security.md).
            async with open_aio_channel(
                f"127.0.0.1:{daemon.port}", ChannelSecurity(daemon.token, tls=daemon.client_tls())
            ) as channel:
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


def mask_only(artifact: Path, repeats: int) -> dict[str, Any]:
    """Per-token mask cost without the model: random-logit walks, fastest of `repeats` per position."""
    art = open_artifact(artifact)
    vocab = art.manifest.model.vocab_size
    tokenizers = TokenizerCache()
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {"repeats": repeats}
    for split in ("tuning", "held_out"):
        fastest: list[float] = []
        raw: list[float] = []
        for case in cases(split):
            constraint = Constraint(ConstraintKind.JSON_SCHEMA, case.schema_text)
            guide = TokenGuide.start(constraint, art, tokenizers)
            walk: list[int] = []
            while len(walk) < 256 and not guide.complete:
                token = int(np.argmax(guide.mask(rng.standard_normal(vocab).astype(np.float32))))
                if token in art.stop_token_ids:
                    break
                guide.advance(token)
                walk.append(token)
            zeros = np.zeros(vocab, dtype=np.float32)
            runs = []
            for _ in range(repeats):
                guide = TokenGuide.start(constraint, art, tokenizers)
                for token in walk:
                    guide.mask(zeros)
                    guide.advance(token)
                runs.append(guide.mask_seconds)
            times = np.array(runs) * 1e6  # [repeats, len(walk)] µs
            fastest += times.min(axis=0).tolist()
            raw += times.ravel().tolist()
        report[split] = {
            "tokens": len(fastest),
            "fastest_us_p50": round(float(np.median(fastest)), 1),
            "fastest_us_p99": round(float(np.percentile(fastest, 99)), 1),
            "fastest_us_max": round(float(np.max(fastest)), 1),
            "raw_us_p50": round(float(np.median(raw)), 1),
            "raw_us_p99": round(float(np.percentile(raw, 99)), 1),
        }
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, default=Path(".cache/artifacts/default"))
    ap.add_argument("--samples", type=int, default=10, help="answers per schema (5 schemas per split)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    ap.add_argument("--mask-only", action="store_true", help="time the mask alone (no model, no daemon)")
    ap.add_argument("--repeats", type=int, default=15, help="--mask-only: replays per walk")
    ns = ap.parse_args()
    report = mask_only(ns.artifact, ns.repeats) if ns.mask_only else asyncio.run(run(ns.artifact, ns.samples))
    text = json.dumps(report, indent=2)
    print(text)
    if ns.out:
        ns.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
