"""``build_artifact``: a plan applied to a loaded fp model -> a faithful, measured, published MNN artifact.

Both `edgellm convert` (a preset: RTN INT4 block 32, INT8 lm_head/embedding, checked by the
conversion gate) and `edgellm quantize` (any plan, windowed evaluation) run this one pipeline:

  quantize (torch) -> export (llmexport lays out the graph, our integers overwrite its weights)
  -> finish (token table, runtime settings, RoPE check) -> measure -> manifest -> publish

Everything is assembled in a hidden staging directory beside the output and published in one
atomic swap, so a failure leaves the previous artifact (or nothing) in place.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import platform
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from edgellm.common.allocator import release_free_memory
from edgellm.common.artifact_files import list_files, publish, write_manifest
from edgellm.common.manifest import (
    SCHEMA_VERSION,
    ArtifactManifest,
    Build,
    CalibrationSource,
    Checks,
    Evaluation,
    Quantization,
    Tokenizer,
)
from edgellm.common.progress import Progress, quiet, scaled
from edgellm.common.runtime import Runtime
from edgellm.host.builder.host_source import for_device, write_host_source
from edgellm.host.builder.layer_eval import StreamedColumns
from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.builder.sampling import sampling_defaults
from edgellm.host.convert.export_facts import ExportFacts, check_export, facts_of_model
from edgellm.host.convert.llmexport_adapter import ExportFailed, check_exported_rope_theta
from edgellm.host.evaluate.evaluate import EVAL_FILE, evaluate
from edgellm.host.evaluate.scorers import MnnScorer, Scorer, TorchScorer
from edgellm.host.quantize.adapter import DecoderAdapter, adapter_for
from edgellm.host.quantize.apply import quantize_model
from edgellm.host.quantize.awq import AwqScale, folded_tensors
from edgellm.host.quantize.calibration import calibration_path
from edgellm.host.quantize.device import device
from edgellm.host.quantize.export import ExportReport, export_artifact
from edgellm.host.quantize.grid import QuantizedWeight
from edgellm.host.quantize.plan import QuantPlan

if TYPE_CHECKING:
    from edgellm.host.convert.reference import ChunkedLogits, PendingHead
    from edgellm.host.convert.verify import FpReference

log = structlog.get_logger(__name__)

HF_TOKENIZER = "tokenizer.json"
_TOOLS = ("torch", "transformers", "mnn", "llmexport", "gguf", "numpy")


@dataclass(frozen=True)
class Measure:
    """What a build measures before it publishes (both are recorded in the manifest)."""

    evaluate: bool = True  # windowed fp / torch / MNN perplexity on loaded.evaluation -> "evaluation"
    verify: bool = False  # the conversion gate (refuses a bad artifact) -> "checks"


@dataclass(frozen=True)
class Quantized:
    """A torch model holding a plan's dequantized weights, the integers behind them, and AWQ scales."""

    model: Any
    weights: dict[str, QuantizedWeight]
    scales: list[AwqScale] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class BuildResult:
    """A published artifact."""

    path: Path
    manifest: ArtifactManifest
    cpu_seconds: float  # quantization CPU time (all threads), the wall time's contention-free twin

    def summary(self) -> dict[str, Any]:
        """JSON-ready result for `edgellm quantize --json` and HostService jobs."""
        m = self.manifest
        return {
            "artifact": str(self.path),
            "name": m.name,
            "size_bytes": m.size_bytes,
            "plan": m.quantization.plan,
            "quantization": {k: v for k, v in asdict(m.quantization).items() if k != "plan"},
            "runtime": asdict(m.runtime),
            "evaluation": asdict(m.evaluation) if m.evaluation else None,
            "checks": asdict(m.checks) if m.checks else None,
            "seconds": m.build.seconds,
            "quantize_cpu_seconds": round(self.cpu_seconds, 1),
        }


def quantize(
    loaded: LoadedModel, plan: QuantPlan, progress: Progress = quiet, *, in_place: bool = False
) -> Quantized:
    """Apply ``plan`` to a copy of the fp model (to the fp model itself when ``in_place``)."""
    start, cpu = time.perf_counter(), time.process_time()
    progress(0.0, "calibrate: tokenizing calibration text")
    calib = loaded.calibration(plan)
    # A copy keeps the fp model for later builds and the evaluation's fp column: a second model.
    stream = loaded.stream
    if stream is not None and not in_place:
        raise ValueError("a streamed model is quantized in place only (build_artifact consume=True)")
    qmodel = loaded.model if in_place else copy.deepcopy(loaded.model)
    materialize, stored = (None, None) if stream is None else (stream.layer, stream.stored_dtype)
    on = device(loaded.device)
    weights, scales = quantize_model(
        qmodel, plan, calib, scaled(progress, 0.05, 0.95), on, materialize, stored
    )
    if stream is not None:
        # Later forwards (the gate's reference logits) load these integers, and AWQ's folded norms.
        stream.quantized, stream.overrides = weights, folded_tensors(scales)
    return Quantized(qmodel, weights, scales, time.perf_counter() - start, time.process_time() - cpu)


def build_artifact(
    loaded: LoadedModel,
    plan: QuantPlan,
    output: Path,
    *,
    builder: str = "quantize",
    measure: Measure = Measure(),
    quantized: Quantized | None = None,
    force: bool = True,
    consume: bool = False,
    progress: Progress = quiet,
) -> BuildResult:
    """Quantize (unless ``quantized`` is given), export, measure and publish ``output`` atomically.

    With ``consume`` the fp model is quantized in place (the caller needs it no more): the gate's
    fp figures are taken first, and the build holds one torch model instead of two. A streamed
    model's evaluation then walks its windows layer by layer (builder/layer_eval.py): the fp
    column's before quantizing, the quantized column's after, and the model is freed before the export.
    """
    start = time.perf_counter()
    sampling = sampling_defaults(loaded.source, loaded.hf_dir)  # a bad generation_config fails first
    fp, columns = _before_consuming(loaded, measure, quantized, consume)
    _free()
    if quantized is None:
        quantized = quantize(loaded, plan, scaled(progress, 0.0, 0.6, "quantize: "), in_place=consume)
    facts = facts_of_model(quantized.model)  # its rotary buffers: before a consumed model is freed
    # A whole model's AWQ export saves the scaled model (weights_dir=None below): it keeps its weights.
    # A streamed one's export reads the checkpoint with the folded tensors written over.
    whole_awq = bool(quantized.scales) and loaded.stream is None
    pending = _release(quantized, fp, loaded, columns) if consume and not whole_awq else None
    seconds = {"quantize": round(quantized.seconds, 2)}
    staging = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        step = time.perf_counter()
        progress(0.6, "export: llmexport graph + carried integer weights")
        report = export_artifact(
            quantized.model,
            loaded.hf_dir,
            plan,
            quantized.weights,
            adapter_for(quantized.model),
            staging,
            # AWQ folds scales into norms; otherwise only linears changed, and those are carried.
            weights_dir=None if whole_awq else loaded.hf_dir,
            overrides=folded_tensors(quantized.scales),
        )
        ref_logits = _gate_reference(pending, report, adapter_for(quantized.model), columns)
        if consume:
            _drop_integers(quantized, loaded)
        tokenizer = _finish(staging, loaded, plan, facts)
        seconds["export"] = round(time.perf_counter() - step, 2)
        gate = (fp, ref_logits)
        evaluation, checks = _measure(staging, loaded, quantized, measure, seconds, progress, gate, columns)
        seconds["total"] = round(time.perf_counter() - start + quantized.seconds, 2)
        manifest = ArtifactManifest(
            schema_version=SCHEMA_VERSION,
            name=artifact_name(loaded, plan, builder),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            source=for_device(loaded.source),  # host paths stay in HOST_SOURCE, off the phone
            model=loaded.shape,
            tokenizer=tokenizer,
            quantization=_quantization(loaded, plan, quantized, report.round_trip_exact),
            runtime=Runtime.for_kv_cache(plan.kv_cache),
            build=Build(builder=builder, tools=_tool_versions(), seconds=seconds),
            files=list_files(staging),
            evaluation=evaluation,
            checks=checks,
            sampling=sampling,
        )
        write_manifest(staging, manifest)
        calibrated = loaded.calibration(plan) is not None
        write_host_source(staging, loaded.source, calibration_path(plan.calibration) if calibrated else None)
        publish(staging, output, force=force)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress(1.0, "done: artifact written")
    log.info("artifact_built", out=str(output), builder=builder, size_mb=round(manifest.size_bytes / 1e6, 1))
    return BuildResult(output, manifest, quantized.cpu_seconds)


def artifact_name(loaded: LoadedModel, plan: QuantPlan, builder: str) -> str:
    """The manifest's name: the source's for the convert preset, with the recipe for any other plan."""
    if builder == "convert":
        return loaded.source.name
    return f"{loaded.source.name}-{plan.name}-{plan.method}-b{plan.block}"


def _finish(staging: Path, loaded: LoadedModel, plan: QuantPlan, facts: ExportFacts) -> Tokenizer:
    """Token table, the runtime settings in config.json, what the exported graph computes and the chat
    template checked."""
    from edgellm.host.convert.chat_template import check_conformance, has_template, system_role
    from edgellm.host.convert.token_table import (
        ROUND_TRIP_TEXT,
        check_round_trip,
        stop_token_ids,
        token_pieces,
        write_for_tokenizer,
    )
    from edgellm.host.convert.verify import PROMPTS

    pieces = token_pieces(loaded.tokenizer)
    # Cheap guard: the table must reproduce the text byte for byte.
    bad = check_round_trip(loaded.tokenizer, pieces, (*PROMPTS, ROUND_TRIP_TEXT))
    if bad is not None:
        raise ExportFailed(f"token table does not round-trip {bad!r}")
    table = write_for_tokenizer(loaded.tokenizer, staging)
    hf_tokenizer = write_hf_tokenizer(loaded.tokenizer, staging)
    write_runtime(staging, Runtime.for_kv_cache(plan.kv_cache))
    check_exported_rope_theta(staging, loaded.shape.rope_theta)
    check_export(staging, facts)  # RoPE per layer, window, caps: before the gate
    role = system_role(loaded.tokenizer) if has_template(loaded.tokenizer) else "supported"
    if has_template(loaded.tokenizer):
        check_conformance(staging, loaded.tokenizer, role)
    return Tokenizer(
        token_table=table.name,
        mnn_tokenizer="tokenizer.mtok",
        stop_token_ids=tuple(stop_token_ids(loaded.tokenizer, loaded.hf_dir)),
        vocab_size=len(pieces),
        hf_tokenizer=hf_tokenizer,
        system_role=role,
    )


def write_hf_tokenizer(tokenizer: Any, artifact: Path) -> str:
    """Write the fast tokenizer's JSON as ``tokenizer.json`` (for constrained output on the device).

    Serialised from the loaded tokenizer, not copied from the checkout, as llguidance's own
    ``llguidance.hf.from_tokenizer`` does: the backend's JSON includes tokens added by
    tokenizer_config.json, and padding/truncation are switched off on a copy so the device
    tokenizes exactly as the model was trained.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ExportFailed(
            f"{type(tokenizer).__name__} is not a fast (Rust tokenizers) tokenizer: constrained "
            "output needs tokenizer.json; convert the checkpoint's tokenizer to a fast one"
        )
    backend = copy.copy(backend)
    backend.no_padding()
    backend.no_truncation()
    doc = json.loads(backend.to_str())
    # Why: llguidance reads a tokenizer as byte-level (GPT-2's byte <-> printable-unicode map) only
    # when its decoder is ByteLevel. transformers 5's GGUF conversion writes the decoder as
    # Sequence[ByteFallback, Fuse, Replace('▁'), ByteLevel], and llguidance then takes 32,888 of
    # SmolLM2's 49,152 tokens by their printable spelling ('Ġ' for a space): every mask is wrong.
    # With a byte-level pre-tokenizer the plain ByteLevel decoder is the same mapping; the daemon
    # checks llguidance's bytes against tokens.bin for every id before it trusts the file.
    if (doc.get("pre_tokenizer") or {}).get("type") == "ByteLevel":
        doc["decoder"] = {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        }
    path = artifact / HF_TOKENIZER
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path.name


def write_runtime(artifact: Path, runtime: Runtime) -> None:
    """Write the runtime settings into MNN's config.json (the manifest records the same object)."""
    path = artifact / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(runtime.mnn_config())
    path.write_text(json.dumps(config, indent=4) + "\n", encoding="utf-8")


def _measure(
    staging: Path,
    loaded: LoadedModel,
    quantized: Quantized,
    measure: Measure,
    seconds: dict[str, float],
    progress: Progress,
    gate: tuple[FpReference | None, ChunkedLogits | None] = (None, None),
    columns: StreamedColumns | None = None,
) -> tuple[Evaluation | None, Checks | None]:
    evaluation = checks = None
    if measure.evaluate:
        step = time.perf_counter()
        progress(0.8, "evaluate: fp, torch quantized and MNN")
        scorers: dict[str, Scorer] = {
            "fp": TorchScorer(loaded.model) if columns is None else columns.fp,
            "torch": TorchScorer(quantized.model) if columns is None else columns.quantized_column(),
            "mnn": MnnScorer(staging),
        }
        cfg = loaded.evaluation
        results = evaluate(loaded.eval_ids, scorers, cfg, "fp", scaled(progress, 0.8, 0.1, "evaluate: "))
        text = cfg.text_file.name if cfg.text_file else EVAL_FILE
        evaluation = Evaluation(text, cfg.tokens, cfg.context, cfg.stride, results)
        seconds["evaluate"] = round(time.perf_counter() - step, 2)
    if measure.verify:
        from edgellm.host.convert.verify import verify

        step = time.perf_counter()
        progress(0.9, "verify: MNN against torch (fidelity, perplexity)")
        fp, logits = gate
        model, tokenizer = loaded.model, loaded.tokenizer
        checks = verify(staging, model, tokenizer, reference=quantized.model, fp=fp, reference_logits=logits)
        seconds["verify"] = round(time.perf_counter() - step, 2)
    return evaluation, checks


def _before_consuming(
    loaded: LoadedModel, measure: Measure, quantized: Quantized | None, consume: bool
) -> tuple[FpReference | None, StreamedColumns | None]:
    """What a consuming build takes from the fp model before it is quantized in place: the gate's fp
    figures, the evaluation's fp column (a streamed model's: builder/layer_eval.py)."""
    if not consume:
        return None, None
    if quantized is not None or (measure.evaluate and loaded.stream is None):
        raise ValueError(
            "consume quantizes the fp model in place: not with a given model, nor evaluate of a whole model"
        )
    fp = _fp_reference(loaded) if measure.verify else None
    return fp, StreamedColumns.before_quantizing(loaded) if measure.evaluate else None


def _fp_reference(loaded: LoadedModel) -> FpReference:
    from edgellm.host.convert.verify import fp_reference

    materialize = None if loaded.stream is None else loaded.stream.layer
    return fp_reference(loaded.model, loaded.tokenizer, materialize=materialize)


def _release(
    quantized: Quantized, fp: FpReference | None, loaded: LoadedModel, columns: StreamedColumns | None
) -> ChunkedLogits | PendingHead | None:
    """Take the gate's torch reference (and the evaluation's quantized column) now, then free the
    consumed model's tensors (moved to meta).

    Why: the export's llmexport child and the gate's MNN model each came on top of the fp32 torch
    model, which no later step needs but for the reference. What is kept is the final hidden states
    of the evaluation tokens ([T, H]: 8 MB at Llama-3.2-1B); the head that turns them into logits a
    chunk of positions at a time reads lm_head's integers from the artifact once it is written
    (``_gate_reference``). The [T, V] logits themselves were 0.5 GB there (convert/reference.py).
    """
    from edgellm.host.convert.reference import PendingHead, WholeLogits, final_hidden, reference_logits, whole

    ref: ChunkedLogits | PendingHead | None = None
    if columns is not None:
        columns.after_quantizing(loaded)
    if fp is not None:
        model = quantized.model
        materialize = None if loaded.stream is None else loaded.stream.layer
        if "lm_head" not in quantized.weights:  # no integers to form the head from: keep the logits
            ref = WholeLogits(whole(reference_logits(model, fp.ids, materialize)))
        else:
            bias = model.get_output_embeddings().bias
            hidden = final_hidden(model, [fp.ids], materialize)[0]
            ref = PendingHead(hidden, model.config, None if bias is None else bias.detach().clone())
    quantized.model.to("meta")  # the module tree stays (names, config); its storage is released
    _free()
    return ref


def _gate_reference(
    ref: ChunkedLogits | PendingHead | None,
    report: ExportReport,
    adapter: DecoderAdapter,
    columns: StreamedColumns | None = None,
) -> ChunkedLogits | None:
    """The gate's reference logits, a pending head now reading lm_head's integers from the artifact
    (and the evaluation's quantized column's head likewise)."""
    from edgellm.host.convert.reference import PendingHead

    if columns is not None:
        columns.after_export(report, adapter)

    if not isinstance(ref, PendingHead):
        return ref
    return ref.logits(*report.lm_head_rows(adapter))


def _free() -> None:
    """Collect garbage, then give the freed pages of malloc's heaps back to the kernel.

    Why: a convert frees gigabytes between stages (the torch model, the integers), much of it in
    tensors below glibc's mmap threshold, which stay resident inside the heaps after ``free``
    (measured at Llama-3.2-1B: docs/quantization.md, "Host memory while converting").
    """
    gc.collect()
    release_free_memory()


def _drop_integers(quantized: Quantized, loaded: LoadedModel) -> None:
    """Free the integer weights once they are in the artifact (read back exactly by the export).

    Why: codes are one byte per weight plus fp32 [zero, scale] per block: ~0.6x the fp16 size,
    held through the gate for nothing.
    """
    quantized.weights.clear()
    if loaded.stream is not None:
        loaded.stream.quantized, loaded.stream.overrides = {}, {}
    _free()


def _quantization(loaded: LoadedModel, plan: QuantPlan, quantized: Quantized, exact: bool) -> Quantization:
    calibration = None
    if loaded.calibration(plan) is not None:
        c = plan.calibration
        # The name only: the manifest goes to the phone (the host's path is in HOST_SOURCE).
        calibration = CalibrationSource(calibration_path(c).name, c.samples, c.seq_len)
    return Quantization(
        method=plan.method,
        bits=plan.bits,
        block=plan.block,
        lm_head_bits=plan.lm_head_bits,
        lm_head_block=plan.lm_head_block,
        # A tied embedding reads the quantized lm_head rows (llm_config "tie_embeddings").
        embedding_bits=plan.lm_head_bits if loaded.shape.tie_word_embeddings else 16,
        plan=plan.to_json(),
        round_trip_exact=exact,
        exporter=f"llmexport {_version('llmexport')}",
        calibration=calibration,
        awq_ratios=tuple(round(s.ratio, 3) for s in quantized.scales),
    )


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def _tool_versions() -> dict[str, str]:
    return {"python": platform.python_version(), **{name: _version(name) for name in _TOOLS}}
