"""Our AWQ next to llmcompressor's at the weight level (issue 19): scales, rounding, proxy perplexity.

  python bench/awq_compare.py smooth --variant NAME [--duo]
  python bench/awq_compare.py score  [--tokens 4096] [--variants ...]

``smooth`` runs our AWQ search on the reference's 32 calibration sequences (``ref/calib_ids_32.pt``)
and saves the smoothed, *unrounded* state dict (``ref/awq-smooth-NAME.pt``). ``score`` rounds each
smoothed state with the same rounding (min..max per block, or our MSE range search) and reports
torch prefill perplexity on the **dev** slice (non-overlapping 512-token windows; never the
held-out slice), plus llmcompressor's own integers, and the per-mapping scales each side chose.
A diagnosis tool: the table's figures come from ``bench_quant_eval.py``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import torch

from edgellm.common.paths import cache_dir

REF = cache_dir() / "bench" / "ref"
LLMC = REF / "llmc-awq-b64-c32.pt"


def _loaded() -> Any:
    from edgellm.host.builder.loaded import LoadedModel

    return LoadedModel.open("default")


def smooth(ns: argparse.Namespace) -> None:
    """Our AWQ over every layer; snapshot each layer's smoothed weights before rounding."""
    from dataclasses import replace

    from edgellm.host.quantize import apply
    from edgellm.host.quantize.plan import Calibration, preset, with_calibration

    loaded = _loaded()
    model = loaded.model
    plan = with_calibration(preset("int4", method="awq", block=64), Calibration(samples=32))
    plan = replace(plan, awq_duo=ns.duo)
    ids = torch.load(REF / "calib_ids_32.pt")
    fp_state = {k: v.clone() for k, v in model.state_dict().items()}
    snap: dict[str, torch.Tensor] = {}
    inner = apply._awq_layer

    def spy(adapter: Any, model_: Any, index: int, hidden: Any, spec: Any, *a: Any, **k: Any) -> Any:
        out = inner(adapter, model_, index, hidden, spec, *a, **k)
        for name, t in adapter.layers(model_)[index].state_dict().items():
            snap[f"model.layers.{index}.{name}"] = t.detach().clone()
        return out

    apply._awq_layer = spy  # type: ignore[assignment]
    _, scales = apply.quantize_model(model, plan, ids)
    state = {k: v for k, v in fp_state.items() if k not in snap} | snap
    torch.save({"state": state, "ratios": [s.ratio for s in scales]}, REF / f"awq-smooth-{ns.variant}.pt")
    print("ratios", [s.ratio for s in scales])


def _round(model: Any, how: str) -> None:
    from edgellm.host.quantize.adapter import adapter_for
    from edgellm.host.quantize.grid import rtn_quantize

    for name in adapter_for(model).linear_names(model):
        lin = model.get_submodule(name)
        if how == "intzp":
            lin.weight.data.copy_(_intzp(lin.weight.data))
            continue
        q = rtn_quantize(lin.weight, 4, 64, clip_search=how == "mse")
        lin.weight.data.copy_(q.dequantize())


def _intzp(w: torch.Tensor) -> torch.Tensor:
    """compressed-tensors' asymmetric min..max grid: range widened to hold 0, integer zero point."""
    oc, ic = w.shape
    x = w.reshape(oc, ic // 64, 64)
    lo = x.amin(-1).clamp(max=0)
    hi = x.amax(-1).clamp(min=0)
    scale = (hi - lo) / 15
    zp = torch.round(-lo / scale).clamp(0, 15)  # unsigned form of its signed -8 - lo/scale
    q = torch.clamp(torch.round(x / scale[..., None]) + zp[..., None], 0, 15)
    return ((q - zp[..., None]) * scale[..., None]).reshape(oc, ic)


@torch.no_grad()
def _ppl(model: Any, docs: list[list[int]]) -> float:
    nll, n = 0.0, 0
    for ids in docs:
        for i in range(0, len(ids) - 1, 512):
            x = torch.tensor(ids[i : i + 512]).unsqueeze(0)
            if x.shape[1] < 2:
                continue
            logits = model(x).logits[0, :-1]
            nll += float(torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="sum"))
            n += x.shape[1] - 1
    return math.exp(nll / n)


def _col_ratio(sm: dict[str, torch.Tensor], fp: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    """Per input column, how much the smoothed weight grew: the scale folded into that column."""
    ratio: torch.Tensor = sm[key].norm(dim=0) / fp[key].norm(dim=0)
    return ratio


def _scales(fp: dict[str, torch.Tensor], sm: dict[str, torch.Tensor], layer: int) -> dict[str, torch.Tensor]:
    p = f"model.layers.{layer}."
    return {
        "qkv": fp[p + "input_layernorm.weight"] / sm[p + "input_layernorm.weight"],
        "o": _col_ratio(sm, fp, p + "self_attn.o_proj.weight"),
        "gate_up": fp[p + "post_attention_layernorm.weight"] / sm[p + "post_attention_layernorm.weight"],
        "down": _col_ratio(sm, fp, p + "mlp.down_proj.weight"),
    }


def score(ns: argparse.Namespace) -> None:
    from edgellm.host.evaluate.corpus import Slice
    from edgellm.host.quantize.reference_import import reference_weights

    loaded = _loaded()
    model = loaded.model
    fp_state = {k: v.clone() for k, v in model.state_dict().items()}
    docs = Slice("dev", tokens=ns.tokens).documents(
        lambda t: loaded.tokenizer(t, add_special_tokens=False)["input_ids"]
    )
    print(f"fp: {_ppl(model, docs):.3f}")
    for how in ("minmax", "mse"):
        model.load_state_dict(fp_state)
        _round(model, how)
        print(f"rtn {how}: {_ppl(model, docs):.3f}")
    saved = torch.load(LLMC, weights_only=False)
    states = {"llmc": saved["state"]}
    for v in ns.variants:
        states[v] = torch.load(REF / f"awq-smooth-{v}.pt", weights_only=False)["state"]
    n_layers = len(model.model.layers)
    for name, st in states.items():
        sc = [_scales(fp_state, st, i) for i in range(n_layers)]
        desc = {k: [float(s[k].max() / s[k].min()) for s in sc] for k in ("qkv", "o", "gate_up", "down")}
        print(name, "max/min scale per mapping, layers 0,1,2,15,29:",
              {k: [round(v[i], 1) for i in (0, 1, 2, 15, 29)] for k, v in desc.items()})  # fmt: skip
        if name != "llmc":
            ref = [_scales(fp_state, states["llmc"], i) for i in range(n_layers)]
            for k in ("qkv", "gate_up", "down"):
                cos = [
                    float(torch.nn.functional.cosine_similarity(sc[i][k].log(), ref[i][k].log(), dim=0))
                    for i in range(n_layers)
                ]
                print(f"  log-scale cosine vs llmc {k}: mean {sum(cos) / len(cos):.3f} min {min(cos):.3f}")
        for how in ns.roundings:
            model.load_state_dict(st)
            _round(model, how)
            print(f"{name} smoothed + {how}: {_ppl(model, docs):.3f}", flush=True)
    model.load_state_dict(saved["state"])
    for lname, q in reference_weights(saved, 64).items():
        model.get_submodule(lname).weight.data.copy_(q.dequantize())
    print(f"llmc own integers: {_ppl(model, docs):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("smooth")
    s.add_argument("--variant", required=True)
    s.add_argument("--duo", action="store_true")
    c = sub.add_parser("score")
    c.add_argument("--tokens", type=int, default=4096)
    c.add_argument("--variants", nargs="*", default=[])
    c.add_argument("--roundings", nargs="*", default=["minmax", "mse", "intzp"])
    ns = ap.parse_args()
    torch.manual_seed(0)
    smooth(ns) if ns.cmd == "smooth" else score(ns)


if __name__ == "__main__":
    main()
