"""Which model fits which phone: edgellm's memory model (the daemon's admission figures) per shape.

For each shape (config.json facts of the real model, vocabulary included) it predicts the int4
artifact's size, the daemon's RSS after load and at 2k/8k KV positions, and for phones of
6/8/12/16 GB the longest of 2k/8k that fits MemAvailable with the daemon's 256 MiB margin
(`edgellm.engine.memory_model.predict`, the figures admission uses).

    python bench/model_fit_table.py [--available-fraction 0.4] [--bits 4] [--measured SCALE.json]

With `--measured` (a bench_scale summary JSON) a shape that bench_scale served takes its measured
figures: the artifact, the daemon's RSS after load and its peak over the ~2,048-position
conversation (the larger of the 1- and 2-thread runs); its load peak and 8k figure add the
predicted growth (load peak − loaded, 8k − 2k) to the measured ones, as nothing measures those.

MemAvailable on a phone: an assumption, not a measurement of ours. Android keeps the system,
its services and cached apps resident; the checked-in Snapdragon 8 Gen 3 fixture
(tests/fixtures/sysfs/sd8gen3/proc/meminfo, a 12 GB phone) shows MemAvailable 4.95 GB of
MemTotal 11.78 GB (42%). The default 0.4 of the nominal RAM is the low end of 40-50%.
The KV is budgeted at 4 bytes per element (common/runtime.py FP_KV_BYTES: x86 keeps fp32; an
ARMv8.2 phone stores fp16, half of it), so the figures are upper bounds on a phone.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgellm.common.manifest import ModelShape
from edgellm.engine.memory_model import (
    FP_KV_MODE,
    MIB,
    Prediction,
    QuantFacts,
    kv_resident_bytes,
    linear_params,
    predict,
)

GB = 1024**3
MARGIN = 256 * MIB  # DaemonConfig.engine.memory_margin_bytes
RAM_CLASSES_GB = (6, 8, 12, 16)


def _shape(
    name: str, v: int, h: int, i: int, layers: int, heads: int, kv: int, hd: int, ctx: int, tie: bool
) -> tuple[str, ModelShape]:
    return name, ModelShape("", v, h, i, layers, heads, kv, hd, ctx, 10000.0, tie)


# Each model's own config.json: vocab, hidden, intermediate, layers, heads, kv heads, head_dim,
# max_position_embeddings, tie_word_embeddings.
SHAPES = dict(
    [
        _shape("SmolLM2-135M", 49152, 576, 1536, 30, 9, 3, 64, 8192, True),
        _shape("Qwen2.5-0.5B", 151936, 896, 4864, 24, 14, 2, 64, 32768, True),
        _shape("Llama-3.2-1B", 128256, 2048, 8192, 16, 32, 8, 64, 131072, True),
        _shape("Qwen2.5-1.5B", 151936, 1536, 8960, 28, 12, 2, 128, 32768, True),
        _shape("Qwen3-1.7B", 151936, 2048, 6144, 28, 16, 8, 128, 40960, True),
        _shape("Gemma-2-2B", 256000, 2304, 9216, 26, 8, 4, 256, 8192, True),
        _shape("Llama-3.2-3B", 128256, 3072, 8192, 28, 24, 8, 128, 131072, True),
        _shape("Phi-3.5-mini", 32064, 3072, 8192, 32, 32, 32, 96, 131072, False),
        _shape("Llama-3.1-8B", 128256, 4096, 14336, 32, 32, 8, 128, 131072, False),
    ]
)


# bench_scale's shape keys (bench/scale_shapes.py) of the models above.
SCALE_KEYS = {
    "Qwen2.5-0.5B": "qwen2.5-0.5b",
    "Llama-3.2-1B": "llama-3.2-1b",
    "Qwen2.5-1.5B": "qwen2.5-1.5b",
    "Qwen3-1.7B": "qwen3-1.7b",
    "Gemma-2-2B": "gemma-2-2b",
    "Llama-3.2-3B": "llama-3.2-3b",
    "Phi-3.5-mini": "phi-3.5-mini",
    "Llama-3.1-8B": "llama-3.1-8b",
}


def measured_rows(path: Path) -> dict[str, dict[str, Any]]:
    """A bench_scale summary's measured rows, by this table's model names."""
    rows = json.loads(path.read_text())["rows"]
    by_key = {key: name for name, key in SCALE_KEYS.items()}
    return {by_key[k]: r for k, r in rows.items() if r.get("label") == "measured" and k in by_key}


def from_measured(p: Prediction, m: dict[str, Any]) -> Prediction:
    """P with bench_scale's measured artifact, RSS after load and at ~2k positions (GiB in M)."""
    loaded = int(max(m["E RSS load t1 GiB"] or 0, m["E RSS load t2 GiB"] or 0) * GB)
    at_2k = int(max(m["E RSS peak t1 GiB"] or 0, m["E RSS peak t2 GiB"] or 0) * GB)
    grown = p.at_context[8192] - p.at_context[2048]  # not measured: the model's KV growth
    return replace(
        p,
        artifact=int(m["artifact GiB"] * GB),
        loaded=loaded,
        load_peak=loaded + p.load_peak - p.loaded,
        at_context={2048: at_2k, 8192: at_2k + grown},
    )


def params(shape: ModelShape) -> int:
    """All weights: the linears, the embedding, and an untied lm_head."""
    vocab_rows = shape.vocab_size * shape.hidden_size
    return linear_params(shape) + vocab_rows * (1 if shape.tie_word_embeddings else 2)


def row(
    name: str, shape: ModelShape, quant: QuantFacts, fraction: float, measured: dict[str, Any] | None = None
) -> str:
    """One Markdown row: sizes in MiB, then per RAM class the longest context that fits ('-': none)."""
    p = predict(shape, quant, (2048, 8192))
    if measured is not None:
        p = from_measured(p, measured)
    fits = []
    for ram in RAM_CLASSES_GB:
        have = int(ram * GB * fraction) - MARGIN
        fits.append("8k" if p.fits(8192, have) else "2k" if p.fits(2048, have) else "-")
    kv = [kv_resident_bytes(shape, n, FP_KV_MODE) // MIB for n in (2048, 8192)]
    source = "" if measured is None else " (measured)"
    cells = [name + source, f"{params(shape) / 1e9:.2f}", f"{p.artifact // MIB:,}", f"{p.loaded // MIB:,}"]
    cells += [f"{p.load_peak // MIB:,}", f"{p.at_context[2048] // MIB:,}", f"{p.at_context[8192] // MIB:,}"]
    cells += [f"{kv[0]:,} / {kv[1]:,}", *fits]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--available-fraction", type=float, default=0.4, help="MemAvailable / nominal RAM")
    p.add_argument("--bits", type=int, default=4, choices=(4, 8))
    p.add_argument(
        "--measured", type=Path, help="bench_scale summary JSON: its measured rows replace predictions"
    )
    ns = p.parse_args()
    measured = measured_rows(ns.measured) if ns.measured else {}
    quant = QuantFacts(bits=ns.bits)
    classes = " | ".join(f"{g} GB" for g in RAM_CLASSES_GB)
    print(f"int{ns.bits}-b32, MemAvailable = {ns.available_fraction:.0%} of RAM, daemon RSS in MiB")
    head = "| model | params (B) | artifact | RSS loaded | RSS load peak | RSS 2k | RSS 8k | KV 2k / 8k |"
    print(f"{head} {classes} |")
    print("|" + " --- |" * (8 + len(RAM_CLASSES_GB)))
    for name, shape in SHAPES.items():
        print(row(name, shape, quant, ns.available_fraction, measured.get(name)))


if __name__ == "__main__":
    main()
