"""What an exported graph computes besides its weights, and the check that it is what torch computes.

The facts are the ones an exporter can get wrong without any error and that the weights do not
carry: each layer's RoPE table (inverse frequencies and attention scaling, or none for a NoPE
layer), the sliding window and its layers, the soft-caps and the embedding scale. The llmexport
runner writes them as it exported them (``llm_config.json["edgellm_export"]``); the builder reads
the same facts from the torch model and fails the build on the first field that differs, before
the slower verification gate. docs/llmexport.md lists the defects this catches.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from edgellm.host.convert.llmexport_adapter import ExportFailed

log = structlog.get_logger(__name__)

LLM_CONFIG_KEY = "edgellm_export"
# inv_freq is computed in fp32 on both sides; 1e-6 relative admits a different op order, not a
# different formula (llama3 scaling moves low frequencies by a factor of up to 32).
REL_TOL = 1e-6
# Facts an exporter is known not to reproduce and the build accepts with a warning (why: there).
LIMITATIONS = {
    "attn_softcap": "llmexport exports attention as MNN's fused attention op, which has no logit "
    "soft-capping (Gemma-2: tanh(x/50)*50); attention logits beyond ~20 are then too large",
}


class ExportMismatch(ExportFailed):
    """The exported graph computes something the torch model does not (field named)."""


@dataclass(frozen=True)
class RopeTable:
    """One rotary embedding: ``cos/sin(pos * inv_freq) * scaling``."""

    inv_freq: tuple[float, ...]
    scaling: float = 1.0

    def close_to(self, other: RopeTable) -> bool:
        """Equal up to fp32 rounding."""
        if len(self.inv_freq) != len(other.inv_freq):
            return False
        pairs = [*zip(self.inv_freq, other.inv_freq, strict=True), (self.scaling, other.scaling)]
        return all(math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0) for a, b in pairs)


@dataclass(frozen=True)
class ExportFacts:
    """Per-layer RoPE (None: no rotary) and the model-wide facts the graph bakes in."""

    layer_rope: tuple[RopeTable | None, ...]
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    attn_softcap: float | None = None
    final_softcap: float | None = None
    embed_scale: float | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON with each distinct RoPE table once (``layer_rope`` holds indices into ``rope_tables``)."""
        tables = list(dict.fromkeys(t for t in self.layer_rope if t is not None))
        return {
            "rope_tables": [{"inv_freq": list(t.inv_freq), "scaling": t.scaling} for t in tables],
            "layer_rope": [None if t is None else tables.index(t) for t in self.layer_rope],
            "sliding_window": self.sliding_window,
            "sliding_layers": list(self.sliding_layers),
            "attn_softcap": self.attn_softcap,
            "final_softcap": self.final_softcap,
            "embed_scale": self.embed_scale,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExportFacts:
        """Inverse of ``to_json``."""
        tables = [
            RopeTable(tuple(float(x) for x in t["inv_freq"]), float(t["scaling"]))
            for t in data["rope_tables"]
        ]
        return cls(
            layer_rope=tuple(None if i is None else tables[int(i)] for i in data["layer_rope"]),
            sliding_window=int(data["sliding_window"]),
            sliding_layers=tuple(int(i) for i in data["sliding_layers"]),
            attn_softcap=_opt_float(data.get("attn_softcap")),
            final_softcap=_opt_float(data.get("final_softcap")),
            embed_scale=_opt_float(data.get("embed_scale")),
        )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def sliding_layers_of(cfg: Mapping[str, Any]) -> tuple[int, tuple[int, ...]]:
    """(window, sliding layer indices) from a config dict; (0, ()) when no layer slides."""
    window = int(cfg.get("sliding_window") or 0)
    layer_types = cfg.get("layer_types")
    if not window:
        return 0, ()
    if layer_types:
        layers = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
    elif cfg.get("use_sliding_window", True):  # Mistral v0.1: every layer; Qwen2 says False
        layers = tuple(range(int(cfg["num_hidden_layers"])))
    else:
        layers = ()
    return (window, layers) if layers else (0, ())


def rope_tables(rotary: Any) -> dict[str, RopeTable]:
    """The tables of a transformers ``*RotaryEmbedding``: {"all": t} or one per layer type (Gemma-3)."""
    if hasattr(rotary, "inv_freq"):
        return {"all": RopeTable(_floats(rotary.inv_freq), float(rotary.attention_scaling))}
    return {
        kind: RopeTable(
            _floats(getattr(rotary, f"{kind}_inv_freq")), float(getattr(rotary, f"{kind}_attention_scaling"))
        )
        for kind in rotary.layer_types
    }


def _floats(tensor: Any) -> tuple[float, ...]:
    return tuple(float(x) for x in tensor.detach().float().cpu().flatten().tolist())


def layer_rope_kind(config: Any, layer: int, tables: Mapping[str, RopeTable]) -> str | None:
    """Which table ``layer`` uses in transformers (None: a NoPE layer, SmolLM3's ``no_rope_layers``)."""
    no_rope = getattr(config, "no_rope_layers", None)
    if no_rope is not None and not no_rope[layer]:
        return None
    return "all" if "all" in tables else str(config.layer_types[layer])


def facts_of_model(model: Any) -> ExportFacts:
    """The facts a transformers causal LM computes (its own rotary buffers, config and embedding)."""
    config = model.config
    tables = rope_tables(model.model.rotary_emb)
    kinds = [layer_rope_kind(config, i, tables) for i in range(int(config.num_hidden_layers))]
    window, sliding = sliding_layers_of(config.to_dict())
    embed_scale = getattr(model.model.embed_tokens, "embed_scale", None)
    return ExportFacts(
        layer_rope=tuple(None if kind is None else tables[kind] for kind in kinds),
        sliding_window=window,
        sliding_layers=sliding,
        attn_softcap=_opt_float(getattr(config, "attn_logit_softcapping", None)),
        final_softcap=_opt_float(getattr(config, "final_logit_softcapping", None)),
        embed_scale=None if embed_scale is None else float(embed_scale),
    )


def mismatches(exported: ExportFacts, expected: ExportFacts) -> dict[str, str]:
    """{field: what differs}, empty when the export computes what torch computes."""
    found: dict[str, str] = {}
    if len(exported.layer_rope) != len(expected.layer_rope):
        found["layer_rope"] = (
            f"{len(exported.layer_rope)} layers exported, model has {len(expected.layer_rope)}"
        )
    for i, (got, want) in enumerate(zip(exported.layer_rope, expected.layer_rope, strict=False)):
        if (got is None) != (want is None) or (
            got is not None and want is not None and not got.close_to(want)
        ):
            found[f"layer_rope[{i}]"] = f"exported {_describe(got)}, model {_describe(want)}"
            break  # one layer names the defect; the rest usually repeat it
    for name in ("sliding_window", "sliding_layers", "attn_softcap", "final_softcap", "embed_scale"):
        got_v, want_v = getattr(exported, name), getattr(expected, name)
        if not _same(got_v, want_v):
            found[name] = f"exported {got_v}, model {want_v}"
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=REL_TOL)
    return bool(a == b)


def _describe(table: RopeTable | None) -> str:
    if table is None:
        return "no rotary"
    head = ", ".join(f"{x:.6g}" for x in table.inv_freq[-3:])
    return f"inv_freq[..-3:] [{head}] scaling {table.scaling:.6g}"


def read_exported(artifact_dir: Path) -> ExportFacts | None:
    """The facts the runner recorded, or None for an artifact exported before they were."""
    llm_config = json.loads((artifact_dir / "llm_config.json").read_text(encoding="utf-8"))
    data = llm_config.get(LLM_CONFIG_KEY)
    return None if data is None else ExportFacts.from_json(data)


def check_export(artifact_dir: Path, expected: ExportFacts) -> dict[str, str]:
    """Raise ExportMismatch on the first unexpected difference; return the accepted limitations."""
    exported = read_exported(artifact_dir)
    if exported is None:
        raise ExportMismatch(
            f"{artifact_dir}/llm_config.json has no {LLM_CONFIG_KEY!r}: not exported by our runner"
        )
    found = mismatches(exported, expected)
    accepted = {name: f"{diff}: {LIMITATIONS[name]}" for name, diff in found.items() if name in LIMITATIONS}
    wrong = {name: diff for name, diff in found.items() if name not in LIMITATIONS}
    if wrong:
        detail = "; ".join(f"{name}: {diff}" for name, diff in wrong.items())
        raise ExportMismatch(f"the exported graph does not compute what the model does ({detail})")
    for name, why in accepted.items():
        log.warning("export_limitation", field=name, detail=why)
    return accepted
