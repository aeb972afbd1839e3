"""Quantization plans as data: a JSON document of per-layer bits/block/method, with presets.

A plan says *what* to do; algorithms and the exporter apply it. Layer rules match module
names (``model.layers.3.mlp.down_proj``) with shell patterns; the last matching rule wins.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from edgellm.common.errors import InvalidArgument
from edgellm.common.paths import data_dir
from edgellm.common.runtime import KV_CACHE_MODES
from edgellm.host.evaluate.evaluate import is_evaluation_text

METHODS = ("rtn", "gptq", "awq")
BITS = (4, 8)
PRESETS = ("int4", "int8", "mixed", "auto")
GRIDS = ("mse", "minmax")  # a method's final block ranges: MSE clipping search or min..max
# Defaults of `edgellm quantize` and of HostService.Quantize alike (plan_from_spec applies them).
DEFAULT_METHOD = "gptq"
DEFAULT_BITS = 4
DEFAULT_BLOCK = 64
_BLOCK_CANDIDATES = (16, 32, 64, 128, 192, 256)


class PlanError(InvalidArgument):
    """A plan that cannot be applied to this model, with the reason (INVALID_ARGUMENT in a job too)."""


@dataclass(frozen=True)
class LayerSpec:
    """How one linear is quantized."""

    bits: int
    block: int  # 0 = per channel
    method: str


@dataclass(frozen=True)
class LayerRule:
    """A per-layer-pattern override; unset fields inherit the plan defaults."""

    pattern: str
    bits: int | None = None
    block: int | None = None
    method: str | None = None


@dataclass(frozen=True)
class Calibration:
    """Where calibration text comes from: never the evaluation (test) split."""

    file: str = "wikitext2-valid.txt"  # relative names resolve against the data directory
    samples: int = 128
    seq_len: int = 256


@dataclass(frozen=True)
class QuantPlan:
    """A complete quantization plan."""

    name: str = "int4"
    method: str = "rtn"
    bits: int = 4
    block: int = 64
    rules: tuple[LayerRule, ...] = ()
    lm_head_bits: int = 8  # tied models share it with the embedding table
    lm_head_block: int = 0
    kv_cache: str = "fp"
    calibration: Calibration = field(default_factory=Calibration)
    gptq_act_order: bool = True  # GPTQ column order by Hessian diagonal, static block grids
    # GPTQ block ranges: "minmax" (as llmcompressor; better on the decode path, docs/benchmarks.md)
    # or "mse" (the clipping search RTN uses: error feedback pushes later columns past a clipped range)
    gptq_grid: str = "minmax"
    awq_duo: bool = False  # AWQ scales from activations and weights (llmcompressor's duo scaling)
    # AWQ's final block ranges: "minmax", the grid its scale search scored every candidate on (as
    # llmcompressor), or "mse" (the clipping search; the scales were not chosen for it: worse,
    # docs/quantization.md "Our GPTQ and AWQ, and llmcompressor as the reference")
    awq_grid: str = "minmax"

    def spec_for(self, name: str, parts: Sequence[str] = ()) -> LayerSpec:
        """The resolved spec for module ``name``.

        A fused linear (Phi-3's ``qkv_proj``) is one tensor with one precision: a rule naming
        it or any of its ``parts`` (the split names, ``q_proj``...) applies, and the parts must
        end up with the same spec, else PlanError says which part got what.
        """
        if not parts:
            return self._spec((name,))
        specs = {part: self._spec((name, part)) for part in parts}
        if len(set(specs.values())) > 1:
            raise PlanError(_split_fused(name, specs))
        return specs[parts[0]]

    def _spec(self, names: tuple[str, ...]) -> LayerSpec:
        """Defaults overridden by every rule matching one of ``names``, in order (the last wins)."""
        spec = LayerSpec(self.bits, self.block, self.method)
        for rule in self.rules:
            if any(fnmatch.fnmatchcase(n, rule.pattern) for n in names):
                spec = LayerSpec(
                    rule.bits if rule.bits is not None else spec.bits,
                    rule.block if rule.block is not None else spec.block,
                    rule.method if rule.method is not None else spec.method,
                )
        return spec

    def resolve(
        self, widths: dict[str, int], parts: Mapping[str, tuple[str, ...]] | None = None
    ) -> dict[str, LayerSpec]:
        """Specs for every linear (name -> input width), validating each against its width.

        ``parts``: each fused linear's split names (``DecoderAdapter.fused_parts``). A rule that
        matches no linear (nor a part) is refused: on another family or depth it would be a no-op.
        """
        parts = parts or {}
        self._check_rules_match([*widths, *(p for ps in parts.values() for p in ps)], widths, parts)
        out = {name: self.spec_for(name, parts.get(name, ())) for name in widths}
        errors = [
            f"{name}: block {spec.block} does not divide input width {widths[name]}"
            for name, spec in out.items()
            if spec.block and widths[name] % spec.block
        ]
        if errors:
            raise PlanError(
                f"plan {self.name!r} has invalid blocks ({len(errors)} layers), e.g. {errors[0]}; "
                f"blocks valid for every layer of this model: {valid_blocks(widths.values())} "
                "or 0 (per channel)"
            )
        return out

    def _check_rules_match(
        self, names: list[str], widths: dict[str, int], parts: Mapping[str, tuple[str, ...]]
    ) -> None:
        for rule in self.rules:
            if not any(fnmatch.fnmatchcase(n, rule.pattern) for n in names):
                raise PlanError(_unmatched(rule.pattern, widths, parts))

    def check_widths(self, widths: Iterable[int]) -> None:
        """Refuse, before any model is loaded, a default or lm_head block no linear width allows."""
        widths = sorted(set(widths))
        for name, block in (("block", self.block), ("lm_head_block", self.lm_head_block)):
            bad = [w for w in widths if block and w % block]
            if bad:
                raise PlanError(
                    f"{name} {block} does not divide the linear input width(s) {bad}; "
                    f"valid here: 0 (per channel) or {valid_blocks(widths)}"
                )

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict."""
        doc = asdict(self)
        doc["rules"] = [{k: v for k, v in asdict(r).items() if v is not None} for r in self.rules]
        return doc

    def save(self, path: Path) -> None:
        """Write the plan as JSON."""
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")


def valid_blocks(widths: Iterable[int]) -> list[int]:
    """The common block sizes that divide every one of ``widths`` (besides 0, per channel)."""
    ws = list(widths)
    return [b for b in _BLOCK_CANDIDATES if all(w % b == 0 for w in ws)]


def _short(name: str) -> str:
    """``model.layers.3.self_attn.q_proj`` -> ``self_attn.q_proj``."""
    return name.split(".", 3)[-1] if name.startswith("model.layers.") else name


def _split_fused(name: str, specs: Mapping[str, LayerSpec]) -> str:
    given = "; ".join(f"{_short(p)} {s.bits}-bit block {s.block} {s.method}" for p, s in specs.items())
    return (
        f"{name} is one fused tensor holding {', '.join(_short(p) for p in specs)}, quantized with one "
        f"bits/block/method, but the plan splits it: {given}. Give the parts the same settings, "
        f"or write the rule for the fused linear ('*.{_short(name)}')"
    )


def _unmatched(pattern: str, widths: Mapping[str, int], parts: Mapping[str, tuple[str, ...]]) -> str:
    shorts = dict.fromkeys(_short(n) for n in widths)  # in model order, once each
    fused = {_short(n): "+".join(_short(p).rsplit(".", 1)[-1] for p in ps) for n, ps in parts.items()}
    listed = ", ".join(f"{s} (fused {fused[s]})" if s in fused else s for s in shorts)
    layers = len({n.split(".")[2] for n in widths if n.startswith("model.layers.")})
    return (
        f"rule {pattern!r} matches no linear of this model; rules name the linears inside the "
        f"decoder layers model.layers.0-{layers - 1}: {listed}. lm_head (and the embedding tied to it) "
        "takes lm_head_bits/lm_head_block; norms, embeddings and their scaling stay in float"
    )


def check_calibration(calib: Calibration) -> None:
    """Refuse calibrating on the evaluation text (by name, location or content) or empty samples."""
    path = Path(calib.file)
    _check(
        not is_evaluation_text(path if path.is_absolute() else data_dir() / path),
        f"calibration must not use the test split: {calib.file} is the evaluation text",
    )
    _check(calib.samples > 0 and calib.seq_len > 0, "calibration samples and seq_len must be positive")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise PlanError(msg)


def _check_spec(where: str, bits: int | None, block: int | None, method: str | None) -> None:
    _check(bits is None or bits in BITS, f"{where}: bits must be one of {BITS}, got {bits!r}")
    _check(
        block is None or (isinstance(block, int) and block >= 0 and (block == 0 or block % 16 == 0)),
        f"{where}: block must be 0 (per channel) or a positive multiple of 16, got {block!r}",
    )
    _check(method is None or method in METHODS, f"{where}: method must be one of {METHODS}, got {method!r}")


def plan_from_json(doc: Any) -> QuantPlan:
    """Validate and build a plan from a parsed JSON document; errors name the bad field."""
    _check(isinstance(doc, dict), "plan must be a JSON object")
    known = {f for f in QuantPlan.__dataclass_fields__}
    unknown = set(doc) - known
    _check(not unknown, f"unknown plan fields {sorted(unknown)}; known: {sorted(known)}")
    _check_spec("plan", doc.get("bits"), doc.get("block"), doc.get("method"))
    rules = []
    for i, raw in enumerate(doc.get("rules", [])):
        _check(isinstance(raw, dict) and isinstance(raw.get("pattern"), str), f"rules[{i}] needs a 'pattern'")
        extra = set(raw) - {"pattern", "bits", "block", "method"}
        _check(not extra, f"rules[{i}]: unknown fields {sorted(extra)}")
        _check_spec(f"rules[{i}] ({raw['pattern']})", raw.get("bits"), raw.get("block"), raw.get("method"))
        rules.append(LayerRule(**raw))
    _check(doc.get("lm_head_bits", 8) in (4, 8), "lm_head_bits must be 4 or 8")
    _check_spec("lm_head", doc.get("lm_head_bits"), doc.get("lm_head_block"), None)
    _check(doc.get("gptq_grid", "minmax") in GRIDS, f"gptq_grid must be one of {GRIDS}")
    _check(isinstance(doc.get("awq_duo", False), bool), "awq_duo must be true or false")
    _check(doc.get("awq_grid", "minmax") in GRIDS, f"awq_grid must be one of {GRIDS}")
    kv = doc.get("kv_cache", "fp")
    _check(kv in KV_CACHE_MODES, f"kv_cache must be one of {sorted(KV_CACHE_MODES)}, got {kv!r}")
    calib_raw = doc.get("calibration", {})
    _check(isinstance(calib_raw, dict), "calibration must be an object")
    extra = set(calib_raw) - set(Calibration.__dataclass_fields__)
    _check(not extra, f"calibration: unknown fields {sorted(extra)}")
    calib = Calibration(**calib_raw)
    check_calibration(calib)
    fields = {k: v for k, v in doc.items() if k not in ("rules", "calibration")}
    return QuantPlan(**fields, rules=tuple(rules), calibration=calib)


def load_plan(path: Path) -> QuantPlan:
    """Read a plan file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PlanError(f"{path}: not valid JSON ({exc})") from exc
    return plan_from_json(doc)


def preset(name: str, method: str = "rtn", bits: int = 4, block: int = 64) -> QuantPlan:
    """A named preset; ``mixed`` is the source article's recipe (attention q/k/v INT8, FFN INT4).

    INT8 linears use ``block`` too (not per channel): MNN's low-memory runtime quantizes each
    linear's input per weight block (``dynamic_option`` 2), so a per-channel INT8 weight gets one
    activation scale per token and the artifact drifts from the torch model (SmolLM2: +2.3%
    perplexity per channel, +0.55% at block 64; docs/quantization.md).
    """
    _check_spec(f"preset {name}", bits, block, method)
    if name == "int8":
        return QuantPlan(name="int8", method=method, bits=8, block=block)
    if name == "int4":
        return QuantPlan(name="int4", method=method, bits=4, block=block)
    if name == "mixed":
        rules = tuple(LayerRule(f"*.self_attn.{p}_proj", bits=8) for p in "qkv")
        return QuantPlan(name="mixed", method=method, bits=4, block=block, rules=rules)
    raise PlanError(f"unknown preset {name!r}; presets: {PRESETS} or a JSON file")


def with_calibration(plan: QuantPlan, calib: Calibration) -> QuantPlan:
    """The plan with another calibration source (never the test split)."""
    check_calibration(calib)
    return replace(plan, calibration=calib)


def plan_from_spec(
    spec: str,
    *,
    method: str | None = None,
    bits: int | None = None,
    block: int | None = None,
    kv_cache: str | None = None,
    calibration: dict[str, Any] | None = None,
) -> QuantPlan:
    """The plan for a command-line or HostService spec, with the same defaults on both.

    ``spec`` is a preset (``auto`` gives the INT4 base plan its search starts from), a JSON
    document or a plan file. Options left ``None`` take the defaults (GPTQ, 4 bits, block 64).
    A JSON document or file is applied as written: an option that contradicts it is refused
    rather than silently winning or losing.
    """
    calibration = {k: v for k, v in (calibration or {}).items() if v is not None}
    options = {"method": method, "bits": bits, "block": block, "kv_cache": kv_cache}
    given = {k: v for k, v in options.items() if v is not None}
    if spec in PRESETS:
        plan = _preset_from_options(spec, given)
        if kv_cache is not None:
            _check(kv_cache in KV_CACHE_MODES, f"kv_cache must be one of {sorted(KV_CACHE_MODES)}")
            plan = replace(plan, kv_cache=kv_cache)
        return with_calibration(plan, replace(plan.calibration, **calibration))
    plan = _plan_document(spec)
    for key, value in {**given, **{f"calibration.{k}": v for k, v in calibration.items()}}.items():
        has = (
            getattr(plan.calibration, key.split(".")[1])
            if key.startswith("calibration.")
            else getattr(plan, key)
        )
        _check(
            has == value,
            f"the plan says {key} {has!r} but the options say {value!r}: drop the option or edit the plan",
        )
    return plan


def _preset_from_options(name: str, given: dict[str, Any]) -> QuantPlan:
    method = given.get("method", DEFAULT_METHOD)
    block = given.get("block", DEFAULT_BLOCK)
    bits = given.get("bits", 8 if name == "int8" else DEFAULT_BITS)
    _check_spec(f"preset {name}", bits, block, method)
    if name in ("int8", "mixed", "auto"):
        wanted = 8 if name == "int8" else 4
        _check(
            bits == wanted, f"preset {name} quantizes the layers to INT{wanted}; bits {bits} contradicts it"
        )
    if name == "auto":
        return preset("int4", method=method, block=block)
    return preset("int8" if bits == 8 else name, method=method, block=block)


def _plan_document(spec: str) -> QuantPlan:
    if spec.lstrip().startswith("{"):
        try:
            return plan_from_json(json.loads(spec))
        except json.JSONDecodeError as exc:
            raise PlanError(f"plan JSON is not valid: {exc}") from exc
    path = Path(spec)
    if path.is_file():
        return load_plan(path)
    raise PlanError(f"plan must be one of {PRESETS}, a JSON document or a plan file; got {spec!r}")
