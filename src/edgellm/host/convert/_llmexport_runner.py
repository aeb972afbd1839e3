"""Subprocess entry point that runs llmexport 0.0.5 with its RoPE and sliding-window defects fixed.

Run only by ``llmexport_adapter`` with ``PYTHONPATH`` set to the llmexport package directory:
llmexport imports ``utils.*`` as a top-level package, so it cannot be imported in-process
without a ``sys.path`` hack. Not importable from library code on purpose.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any


def _patch_config() -> None:
    """Fix what llmexport's config maps read wrongly from a transformers-5 config."""
    from utils.config import LlmConfig  # type: ignore[import-not-found]

    original = LlmConfig.from_pretrained.__func__

    def from_pretrained(cls: Any, /, path: str, **kwargs: Any) -> Any:
        config = original(cls, path, **kwargs)
        origin = getattr(config, "origin_config", None)
        _fix_rope_theta(config, origin)
        _fix_sliding(config, origin)
        return config

    LlmConfig.from_pretrained = classmethod(from_pretrained)


def _fix_rope_theta(config: Any, origin: Any) -> None:
    """Read rope theta from ``rope_parameters`` (transformers >= 5)."""
    # Why: llmexport maps `rope_theta` from the HF config's top level. transformers 5 moved
    # it into `config.rope_parameters["rope_theta"]` and drops the top-level attribute, so
    # llmexport falls back to 10000 (SmolLM2 uses 100000) and bakes the wrong RoPE
    # frequencies into the graph without any error. (`_use_transformers_rope` then replaces
    # the whole table; theta is kept right too since llm_config.json records it.)
    params = getattr(origin, "rope_parameters", None)
    if not isinstance(params, dict) or any(isinstance(v, dict) for v in params.values()):
        return  # per-layer-type rope (gemma3/4): tables come from `_use_transformers_rope`
    if "rope_theta" in params and getattr(origin, "rope_theta", None) is None:
        config.rope_theta = float(params["rope_theta"])


def _fix_sliding(config: Any, origin: Any) -> None:
    """Give llmexport the sliding window and layer kinds its gemma2 map does not read."""
    # Why: llmexport's gemma2 map has no `layer_types`/`sliding_window` (its gemma3_text map
    # has), so a Gemma-2 export said `attention_type: full`. Recomputed as LlmConfig does.
    from edgellm.host.convert.export_facts import sliding_layers_of

    if config.sliding_window or origin is None:
        return
    window, layers = sliding_layers_of(origin.to_dict())
    if not layers:
        return
    config.sliding_window = window
    config.layer_types = list(getattr(origin, "layer_types", None) or ["sliding_attention"] * len(layers))
    if len(layers) >= int(config.num_hidden_layers):
        config.attention_type = "sliding"
    else:
        config.attention_type = "mix"
        config.sliding_attn_layers = list(layers)


def _reference_rotary(origin: Any) -> Any:
    """transformers' own rotary module for ``origin`` (built from the config; no weights)."""
    import transformers

    mapping: Any = transformers.AutoModelForCausalLM._model_mapping
    model_class = mapping[type(origin)]
    module = sys.modules[model_class.__module__]
    rotary_class = getattr(module, model_class.__name__.replace("ForCausalLM", "RotaryEmbedding"))
    return rotary_class(origin)


def _use_transformers_rope(model: Any, config: Any) -> None:
    """Replace llmexport's RoPE tables with transformers' and drop RoPE on NoPE layers."""
    # Why: llmexport's Rotary implements only default/dynamic/yarn/longrope(short factor);
    # llama3 and linear scaling fall through to the default table (tiny llama3: MNN vs torch
    # KL 1.6e-4 below position 64, 3.7e-3 beyond 512). Gemma-3 gets one table for both
    # layer kinds, SmolLM3's no_rope_layers are ignored. transformers' tables are exact.
    from edgellm.host.convert.export_facts import layer_rope_kind, rope_tables

    tables = rope_tables(_reference_rotary(config.origin_config))
    kinds = [layer_rope_kind(config.origin_config, i, tables) for i in range(len(model.blocks))]
    for i, kind in enumerate(kinds):
        if kind is None:
            model.blocks[i].self_attn.rotary = None  # Attention.forward skips RoPE on None
    used = sorted({k for k in kinds if k is not None})
    if not used or model.rotary.is_mrope:
        return
    _set_table(model.rotary, tables[used[0]])
    if len(used) == 1:
        return
    # Two kinds (Gemma-3): llmexport's forward gives `rotary_full` to every layer not in
    # `sliding_attn_layers` and `rotary` to the rest (its gemma4 path).
    if used != ["full_attention", "sliding_attention"] or config.attention_type != "mix":
        raise SystemExit(f"edgellm: cannot map RoPE layer kinds {used} onto llmexport's two rotaries")
    _set_table(model.rotary, tables["sliding_attention"])
    model.rotary_full = copy.deepcopy(model.rotary)
    _set_table(model.rotary_full, tables["full_attention"])


def _set_table(rotary: Any, table: Any) -> None:
    import torch

    if len(table.inv_freq) != rotary.rotary_dim // 2:
        raise SystemExit(f"edgellm: RoPE table of {len(table.inv_freq)} for rotary_dim {rotary.rotary_dim}")
    rotary.theta = torch.tensor(table.inv_freq, dtype=torch.float32)
    rotary.attention_scaling = table.scaling
    rotary.is_scaled = table.scaling != 1.0


def _exported_facts(model: Any, config: Any) -> dict[str, Any]:
    """What the graph llmexport traced computes (read from its modules after the patches)."""
    from edgellm.host.convert.export_facts import ExportFacts, RopeTable

    sliding = list(getattr(config, "sliding_attn_layers", []) or [])
    if config.attention_type == "sliding":
        sliding = list(range(len(model.blocks)))
    layers: list[RopeTable | None] = []
    for i, block in enumerate(model.blocks):
        rotary = model.rotary_full if model.rotary_full is not None and i not in sliding else model.rotary
        if block.self_attn.rotary is None:
            layers.append(None)
            continue
        scaling = float(rotary.attention_scaling) if rotary.is_scaled else 1.0
        layers.append(RopeTable(tuple(float(x) for x in rotary.theta.flatten().tolist()), scaling))
    scale = model.scale_emb
    return ExportFacts(
        layer_rope=tuple(layers),
        sliding_window=int(config.sliding_window) if sliding else 0,
        sliding_layers=tuple(sliding),
        attn_softcap=None,  # llmexport's Attention (and MNN's fused attention op) has none
        final_softcap=model.lm.final_logit_softcapping,
        embed_scale=None if scale is None else float(scale),
    ).to_json()


CARRIED = "--edgellm_carried_linears"  # our flag (removed before llmexport parses its own)


def _skip_carried_linears() -> None:
    """Load no decoder-linear weight and write zeros for them: the builder carries its integers over."""
    # Why: llmexport loads the whole checkpoint (a 1B bf16 model: 6.6 GiB peak in this child)
    # and quantizes every linear, then `quantize/export.py:carry_weights` overwrites each of
    # those codes and [zero, scale] pairs with ours. Only the layout (offsets, lengths, headers:
    # shapes and bits, never values) and the non-linear weights are needed from this child.
    from utils import mnn_converter, model  # type: ignore[import-not-found]

    from edgellm.host.convert.shards import is_placeholder, load_without_linears

    class _Loader:
        @staticmethod
        def from_pretrained(path: str, **_kwargs: Any) -> Any:
            return load_without_linears(Path(path))

    model.LlmModel.get_model_class = staticmethod(lambda _model_type: _Loader)
    quant = mnn_converter.MNNConverter.quant

    def skip_placeholders(self: Any, weight: Any, bits: int, block: int, symmetric: bool) -> Any:
        if not is_placeholder(weight):
            return quant(self, weight, bits, block, symmetric)
        import torch

        # llmexport's own --skip_weight sizes (its MNNConverter.quant): packed codes, alpha pairs.
        oc, ic = weight.shape
        blocks = ic // (block or ic)
        alpha = torch.zeros(oc * blocks * (1 if symmetric else 2), dtype=torch.float32)
        return torch.zeros((oc * ic * bits + 7) // 8, dtype=torch.uint8), alpha

    mnn_converter.MNNConverter.quant = skip_placeholders


def _block_mnn_telemetry() -> None:
    """Keep pymnn's converter from pip-installing a logging SDK and phoning home."""
    # Why: MNN.tools.mnnconvert imports MNN.tools.utils.log, which runs
    # `pip install -U aliyun-log-python-sdk` when it is missing and then uploads usage
    # logs (with /etc/machine-id). mnnconvert wraps that import in try/except, so a None
    # entry in sys.modules (import raises ImportError) turns the logger off cleanly.
    sys.modules["MNN.tools.utils.log"] = None  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    """Parse llmexport's own flags, export, then record what the graph computes (export_facts)."""
    _block_mnn_telemetry()
    _patch_config()
    if CARRIED in argv:
        argv = [a for a in argv if a != CARRIED]
        _skip_carried_linears()
    from llmexport import LlmExporter, build_args

    from edgellm.host.convert.export_facts import LLM_CONFIG_KEY

    parser = argparse.ArgumentParser(prog="llmexport")
    build_args(parser)
    args = parser.parse_args(argv)
    exporter = LlmExporter(args)
    _use_transformers_rope(exporter.model, exporter.config)
    exporter.export(args.export)
    # Why: llm_config.json does not record the RoPE base (it is baked into the graph), so
    # write the value the exporter's rotary module used; the adapter checks it.
    config_path = Path(args.dst_path) / "llm_config.json"
    llm_config = json.loads(config_path.read_text(encoding="utf-8"))
    llm_config["rope_theta"] = float(exporter.model.rotary.rope_theta)
    llm_config[LLM_CONFIG_KEY] = _exported_facts(exporter.model, exporter.config)
    config_path.write_text(json.dumps(llm_config, ensure_ascii=False, indent=4), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
