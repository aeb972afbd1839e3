"""``convert()``: GGUF or HF checkpoint -> verified MNN artifact, through the one artifact builder.

Convert is the builder with a preset: RTN (no calibration) at INT4 block 32 for the body and INT8
block 32 for the tied lm_head/embedding, measured by the conversion gate (MNN within 5% of torch
fp on both MNN paths, fidelity against the torch quantized model) instead of the windowed evaluation.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import structlog

from edgellm.common.artifact_files import read_manifest, verify_files
from edgellm.common.errors import EdgeError, FailedPrecondition
from edgellm.common.manifest import ArtifactManifest
from edgellm.common.progress import Progress, quiet
from edgellm.common.runtime import Runtime
from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.builder.pipeline import Measure, build_artifact
from edgellm.host.builder.source import DEFAULT, input_widths, resolve_source
from edgellm.host.evaluate.evaluate import EvalConfig
from edgellm.host.quantize.device import choose_device
from edgellm.host.quantize.families import check_supported
from edgellm.host.quantize.plan import QuantPlan, preset

log = structlog.get_logger(__name__)

# Chosen by measurement (docs/llmexport.md): INT4 block 32 for the body, INT8 for the tied
# lm_head/embedding; ppl within 0.3% of torch fp on the first 1024 test tokens at 115 MB.
DEFAULT_BITS = 4
DEFAULT_BLOCK = 32
DEFAULT_LM_BITS = 8
CONVERT_MEASURE = Measure(evaluate=False, verify=True)


def convert_plan(
    bits: int = DEFAULT_BITS, block: int = DEFAULT_BLOCK, lm_bits: int = DEFAULT_LM_BITS
) -> QuantPlan:
    """The convert preset as a plan: RTN at ``bits``/``block``, lm_head at ``lm_bits`` in the same block."""
    base = preset("int8" if bits == 8 else "int4", method="rtn", block=block)
    return replace(base, lm_head_bits=lm_bits, lm_head_block=block)


def convert(
    model: str,
    out_dir: Path,
    bits: int = DEFAULT_BITS,
    block: int = DEFAULT_BLOCK,
    *,
    lm_bits: int = DEFAULT_LM_BITS,
    force: bool = False,
    device: str = "auto",
    progress: Progress = quiet,
) -> ArtifactManifest:
    """Convert ``model`` ('default' or an HF dir) into a verified MNN artifact at ``out_dir``."""
    check_supported(model)  # config.json only: before hashing and loading every weight file
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise FileExistsError(f"{out_dir} exists (pass force=True / --force to replace it)")
    if bits not in (4, 8) or lm_bits not in (4, 8):
        raise ValueError(f"bits and lm_bits must be 4 or 8, got {bits} and {lm_bits}")
    plan = convert_plan(bits, block, lm_bits)
    # Validate before anything heavy (dequantizing, loading) so bad flags fail in milliseconds.
    plan.check_widths(input_widths(resolve_source(model)))
    on = str(choose_device(device))  # cuda without a GPU is refused here, before the load
    progress(0.0, "load: fp model")
    # Streamed: never the whole model in fp32, one decoder layer at a time (docs/quantization.md).
    loaded = LoadedModel.open(model, EvalConfig(), on, streamed=True)
    result = build_artifact(
        loaded, plan, out_dir, builder="convert", measure=CONVERT_MEASURE, force=force, consume=True,
        progress=progress,
    )  # fmt: skip
    return result.manifest


def is_current(artifact: Path, model: str, plan: QuantPlan) -> None:
    """Raise an EdgeError saying why ``artifact`` is not what converting ``model`` with ``plan`` gives now."""
    manifest, _ = read_manifest(artifact)
    verify_files(artifact, manifest)
    if manifest.source.sha256 != resolve_source(model).sha256:
        raise FailedPrecondition("it was built from another source model")
    if manifest.quantization.plan != plan.to_json():
        raise FailedPrecondition("it was built with another plan")
    if manifest.runtime != Runtime.for_kv_cache(plan.kv_cache) or manifest.checks is None:
        raise FailedPrecondition("it was built with other runtime settings or without the conversion gate")
    if manifest.tokenizer.hf_tokenizer is None:
        raise FailedPrecondition("it carries no tokenizer.json (needed for constrained output)")


def ensure_artifact(
    model: str, out_dir: Path, plan: QuantPlan | None = None, progress: Progress = quiet
) -> Path:
    """Return ``out_dir`` holding a current conversion of ``model``, converting only when needed."""
    plan = plan or convert_plan()
    try:
        is_current(out_dir, model, plan)
        log.info("artifact_current", path=str(out_dir))
        return out_dir
    except (EdgeError, OSError) as exc:
        log.info("artifact_rebuild", path=str(out_dir), reason=str(exc))
    convert(model, out_dir, plan.bits, plan.block, lm_bits=plan.lm_head_bits, force=True, progress=progress)
    return out_dir


def ensure_default_artifact(cache_dir: Path) -> Path:
    """Return ``cache_dir`` holding a current default artifact, converting only when needed."""
    return ensure_artifact(DEFAULT, cache_dir)
