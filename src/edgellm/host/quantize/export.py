"""Faithful export: llmexport lays out the graph, then our integers replace its weights.

llmexport would re-quantize the (already fake-quantized) weights on its own min/max grid,
which moves GPTQ/AWQ weights whose blocks do not span all 16 codes. So every linear's codes and
``[zero, scale]`` pairs are written over llmexport's, and read back to prove the artifact holds
exactly the integers the torch quantized model was evaluated with.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from edgellm.host.convert.llmexport_adapter import drop_byproducts, export_mnn
from edgellm.host.convert.shards import tensor_files, write_patched
from edgellm.host.quantize import mnn_weights
from edgellm.host.quantize.adapter import DecoderAdapter
from edgellm.host.quantize.grid import QuantizedWeight
from edgellm.host.quantize.plan import QuantPlan

RunExport = Callable[[Path, Path, Sequence[str]], None]
CARRIED_LINEARS = "--edgellm_carried_linears"  # _llmexport_runner.CARRIED (not importable: child-only)
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_CONFIG_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)


@dataclass(frozen=True)
class ExportReport:
    """What the round-trip check proved."""

    linears: int
    round_trip_exact: bool
    weight_bytes: int
    weight_file: Path
    slots: Mapping[str, mnn_weights.MnnLinear]  # where each carried linear lives, by MNN op name

    def lm_head_rows(self, adapter: DecoderAdapter) -> tuple[Callable[[slice], QuantizedWeight], int]:
        """(part -> lm_head's integers of vocabulary rows ``part``, read from the artifact; vocabulary)."""
        ((op, _),) = adapter.mnn_slots("lm_head")
        slot = self.slots[op]
        return (lambda part: mnn_weights.read_rows(self.weight_file, slot, part)), slot.oc


def run_llmexport(hf_dir: Path, out_dir: Path, flags: Sequence[str]) -> None:
    """Run llmexport through its one adapter; its log stays in a temp dir only when it fails."""
    log_dir = Path(tempfile.mkdtemp(prefix="edgellm-llmexport-"))
    export_mnn(hf_dir, out_dir, flags, log_dir=log_dir)
    shutil.rmtree(log_dir, ignore_errors=True)


def link_checkpoint(source: Path, staging: Path, overrides: Mapping[str, torch.Tensor] | None = None) -> None:
    """Stage ``source``'s config and weight files as symlinks (tokenizer files are copied separately).

    A shard holding a tensor of ``overrides`` (AWQ's folded norms and biases) is staged as a copy
    with those tensors written over, in the shard's own dtype (shards.write_patched).
    """
    # Why: llmexport only lays out the graph and reads the non-linear weights; every linear is
    # overwritten by carry_weights. Saving the fp32 host model for it cost a full fp32 copy on
    # disk, a serialisation buffer in this process, and an fp32 load in llmexport's child (a bf16
    # source is loaded as bf16 from the original shards: half the child's memory).
    staging.mkdir(parents=True)
    patched = _by_shard(source, overrides or {})
    for f in sorted(source.iterdir()):
        if f.name in patched:
            write_patched(f, staging / f.name, patched[f.name])
        elif f.is_file() and (f.suffix in _WEIGHT_SUFFIXES or f.name in _CONFIG_FILES):
            (staging / f.name).symlink_to(f.resolve())


def _by_shard(source: Path, tensors: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """``tensors`` grouped by the file name of the safetensors shard of ``source`` that holds each."""
    if not tensors:
        return {}
    files = tensor_files(source)
    missing = sorted(set(tensors) - set(files))
    if missing:
        raise KeyError(f"checkpoint {source} has no safetensors tensor {missing[0]} to write over")
    out: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in tensors.items():
        out.setdefault(files[name].name, {})[name] = t
    return out


def export_artifact(
    model: nn.Module,
    tokenizer_dir: Path,
    plan: QuantPlan,
    qweights: dict[str, QuantizedWeight],
    adapter: DecoderAdapter,
    out_dir: Path,
    run_export: RunExport = run_llmexport,
    *,
    weights_dir: Path | None = None,
    overrides: Mapping[str, torch.Tensor] | None = None,
) -> ExportReport:
    """Export ``model`` to ``out_dir`` with the integer weights in ``qweights`` carried through.

    With ``weights_dir`` (the source checkpoint, when quantization changed no weight but the
    linears and ``overrides``) llmexport reads that checkpoint through symlinks, its shards holding
    ``overrides`` patched, instead of a saved copy of ``model``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / ".hf"
    shutil.rmtree(staging, ignore_errors=True)
    if weights_dir is not None:
        link_checkpoint(weights_dir, staging, overrides)
    else:
        model.save_pretrained(str(staging))  # type: ignore[operator]
    for f in tokenizer_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template", "vocab", "merges")):
            shutil.copy2(f, staging / f.name)
    per_op = {
        op: {"bits": q.bits, "block_size": q.plan_block}
        for name, q in qweights.items()
        for op, _ in adapter.mnn_slots(name)
    }
    qconf = out_dir / ".quant_config.json"
    qconf.write_text(json.dumps(per_op, indent=1), encoding="utf-8")
    extra = [
        "--quant_bit", str(plan.bits), "--quant_block", str(plan.block),
        "--lm_quant_bit", str(plan.lm_head_bits), "--lm_quant_block", str(plan.lm_head_block),
        "--quant_config", str(qconf.resolve()),
        # Every linear's integers are carried below, so llmexport loads and quantizes none of them.
        CARRIED_LINEARS,
    ]  # fmt: skip
    try:
        run_export(staging, out_dir, extra)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        qconf.unlink(missing_ok=True)
    report = carry_weights(out_dir, qweights, adapter)  # reads llm.mnn.json, so drop it only now
    drop_byproducts(out_dir)
    return report


def carry_weights(
    artifact: Path, qweights: dict[str, QuantizedWeight], adapter: DecoderAdapter
) -> ExportReport:
    """Write every integer weight into the artifact, then read each back and compare exactly."""
    slots = mnn_weights.linears(mnn_weights.graph_json(artifact))
    # A fused linear (Phi-3's qkv_proj) is quantized once and written into its split slots by rows.
    by_op = {op: q.rows(part) for n, q in qweights.items() for op, part in adapter.mnn_slots(n)}
    missing = sorted(set(slots) - set(by_op))
    if missing:
        # A linear we did not quantize would keep llmexport's own rounding: refuse.
        raise ValueError(f"exported graph has linears with no carried weights: {missing[:5]}")
    unknown = sorted(set(by_op) - set(slots))
    if unknown:
        raise ValueError(f"quantized linears not found in the exported graph: {unknown[:5]}")
    weight_file = artifact / "llm.mnn.weight"
    for op, q in by_op.items():
        mnn_weights.write(weight_file, slots[op], q)
    for op, q in by_op.items():
        back = mnn_weights.read(weight_file, slots[op])
        same = (
            torch.equal(back.codes, q.codes)
            and torch.equal(back.scale, q.scale.to(torch.float32))
            and torch.equal(back.zero, q.zero.to(torch.float32))
        )
        if not same:
            raise AssertionError(f"{op}: weights read back from the artifact differ from the torch model's")
    size = weight_file.stat().st_size
    return ExportReport(len(by_op), True, size, weight_file, {op: slots[op] for op in by_op})
