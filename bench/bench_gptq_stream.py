"""GPTQ on a streamed model (builder/streamed.py): seconds per layer, the ETA, peak RSS; first N layers.

GPTQ at 1-8B on a 2-core CPU takes hours, so this runs the first ``--layers`` decoder layers of a
checkpoint (same calibration, same code path as `edgellm quantize --method gptq`: ``quantize_model``
with the stream's ``layer`` context), shows edgellm's own progress bar with its ETA for the whole
model, and extrapolates per layer (labelled so). Only one decoder layer is in memory in fp32.

    python -m bench.bench_gptq_stream --model <work>/qwen2.5-0.5b/hf --layers 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from bench.scale_shapes import GIB, fp16_bytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="an HF safetensors checkpoint dir")
    p.add_argument("--layers", type=int, default=2, help="decoder layers to quantize (0: all)")
    p.add_argument("--calib-samples", type=int, default=16)
    p.add_argument("--calib-len", type=int, default=256)
    ns = p.parse_args()

    import torch

    from edgellm.host.builder.loaded import load_tokenizer
    from edgellm.host.builder.streamed import open_streamed
    from edgellm.host.progress_bar import progress_bar
    from edgellm.host.quantize.apply import quantize_model
    from edgellm.host.quantize.calibration import calibration_ids
    from edgellm.host.quantize.plan import Calibration, preset, with_calibration

    start = time.perf_counter()
    model, stream = open_streamed(ns.model)
    total_layers = len(stream.layers)
    n = ns.layers or total_layers
    # Why truncate: quantize_model walks model.model.layers; the stream keeps the full list.
    model.model.layers = torch.nn.ModuleList(list(stream.layers)[:n])
    plan = with_calibration(
        preset("int4", method="gptq"), Calibration(samples=ns.calib_samples, seq_len=ns.calib_len)
    )
    calib = calibration_ids(load_tokenizer(ns.model), plan.calibration)
    opened = time.perf_counter() - start
    step = time.perf_counter()
    with progress_bar(f"gptq {n}/{total_layers} layers") as bar:
        quantize_model(model, plan, calib, bar, materialize=stream.layer)
    seconds = time.perf_counter() - step
    per_layer = seconds / n
    print(
        json.dumps(
            {
                "model": str(ns.model),
                "layers_run": n,
                "layers_total": total_layers,
                "calibration": [ns.calib_samples, ns.calib_len],
                "open_s": round(opened, 1),
                "gptq_s": round(seconds, 1),
                "per_layer_s": round(per_layer, 1),
                "extrapolated_all_layers_s": round(per_layer * total_layers, 0),
                "max_live_layers": stream.max_live,
                "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 2),
                "fp16_gib": round(fp16_bytes(ns.model) / GIB, 2),
                "torch_threads": torch.get_num_threads(),
                "load_average": list(os.getloadavg()),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
