"""Reference quantization with llmcompressor (vLLM project), run in its own venv.

Usage (inside the venv bench/bench_quant_eval.py makes):
  python bench/llmc_reference.py --method gptq|awq --model HF_DIR --calib CALIB.pt --out OUT.pt
      [--block 64] [--damp 0.01] [--actorder static|none] [--observer minmax|memoryless_mse]

Writes one torch file: ``state`` (the model's floating-point state dict after the method ran: AWQ
folds its scales into norms and linears) and ``linears`` (name -> ``codes`` uint8 0..15, ``scale``
and ``zero_point`` [oc, n_groups]) — the reference's own integers, which our exporter carries
into an MNN artifact bit for bit (``edgellm.host.evaluate.reference``). No edgellm import here:
this venv holds llmcompressor's pins, not ours.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch


def _scheme(block: int, observer: str, actorder: str | None) -> Any:
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    args = QuantizationArgs(
        num_bits=4,
        type="int",
        symmetric=False,  # MNN's grid is asymmetric: [zero, scale] per block
        strategy="group",
        group_size=block,
        observer=observer,
        actorder=actorder,
    )
    return QuantizationScheme(targets=["Linear"], weights=args)


def _patch_cpu_pinning() -> None:
    """Why: AWQ pins its cached activations for host-to-device copies; on a machine without an
    accelerator ``Tensor.pin_memory`` raises, so pinning becomes a no-op (CPU runs need none)."""
    from llmcompressor.pipelines.cache import IntermediatesCache

    IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", choices=("gptq", "awq"), required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--calib", required=True, help="torch file: calibration ids [samples, seq_len]")
    ap.add_argument("--out", required=True)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--damp", type=float, default=0.01)
    ap.add_argument("--actorder", default="static", help="static | weight | none (GPTQ)")
    ap.add_argument("--observer", default="minmax")
    ap.add_argument("--batch", type=int, default=8)
    ns = ap.parse_args()

    from compressed_tensors.quantization.lifecycle.forward import quantize
    from llmcompressor import oneshot
    from torch.utils.data import DataLoader
    from transformers import AutoModelForCausalLM

    _patch_cpu_pinning()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(ns.model, dtype=torch.float32)
    keys = list(model.state_dict())
    ids = torch.load(ns.calib)
    rows = [{"input_ids": r, "attention_mask": torch.ones_like(r)} for r in ids]
    loader: Any = DataLoader(rows, batch_size=ns.batch, shuffle=False)  # type: ignore[arg-type]
    actorder = None if ns.actorder == "none" else ns.actorder
    scheme = _scheme(ns.block, ns.observer, actorder if ns.method == "gptq" else None)
    if ns.method == "gptq":
        from llmcompressor.modifiers.gptq import GPTQModifier

        recipe: Any = GPTQModifier(
            config_groups={"group_0": scheme}, ignore=["lm_head"], dampening_frac=ns.damp, actorder=actorder
        )
    else:
        from llmcompressor.modifiers.quantization import QuantizationModifier
        from llmcompressor.modifiers.transform.awq import AWQModifier

        recipe = [AWQModifier(), QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])]
    start = time.perf_counter()
    oneshot(model=model, dataset=loader, recipe=recipe, num_calibration_samples=len(ids))
    seconds = time.perf_counter() - start
    state = model.state_dict()
    linears: dict[str, dict[str, torch.Tensor]] = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or not hasattr(module, "weight_scale"):
            continue
        mod: Any = module  # carries llmcompressor's attributes
        args = mod.quantization_scheme.weights
        w = mod.weight.detach().float()
        scale = mod.weight_scale.detach().float()
        zp = mod.weight_zero_point.detach()
        g_idx = getattr(mod, "weight_g_idx", None)
        if g_idx is not None and not torch.equal(
            g_idx.cpu(), torch.arange(w.shape[1]) // ns.block
        ):  # non-contiguous groups (actorder "group") have no MNN layout
            raise SystemExit(f"{name}: activation order left non-contiguous groups")
        q = quantize(w, scale, zp, args)  # signed codes -8..7
        linears[name] = {
            "codes": (q.round().to(torch.int16) + 8).to(torch.uint8),
            "scale": scale,
            "zero_point": zp.to(torch.int16),
        }
    meta = {"method": ns.method, "seconds": round(seconds, 1), "block": ns.block, "damp": ns.damp,
            "actorder": ns.actorder, "observer": ns.observer, "samples": int(ids.shape[0]),
            "seq_len": int(ids.shape[1])}  # fmt: skip
    torch.save({"state": {k: state[k] for k in keys}, "linears": linears, "meta": meta}, ns.out)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
