"""One quantization job, shared by `edgellm quantize` and HostService.Quantize: a plan, or a search."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgellm.common.progress import Progress, quiet
from edgellm.host.evaluate.evaluate import EvalConfig
from edgellm.host.quantize.families import check_supported
from edgellm.host.quantize.plan import PlanError, QuantPlan, plan_from_spec

if TYPE_CHECKING:
    from edgellm.host.builder.loaded import LoadedModel


@dataclass(frozen=True)
class QuantizeJob:
    """What to quantize, how, and where to write it. ``budget`` set means ``--plan auto``."""

    model: str  # "default" or a Hugging Face checkpoint directory
    plan: QuantPlan  # the plan to apply, or the base plan the auto search starts from
    output: Path
    budget: float | None = None  # relative perplexity budget of the auto search, e.g. 0.03
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    device: str = "cpu"  # where GPTQ/AWQ compute, resolved from auto|cpu|cuda by make_job


def make_job(
    model: str,
    spec: str,
    output: Path,
    *,
    budget: float | None = None,
    evaluation: EvalConfig | None = None,
    device: str = "auto",
    **options: Any,
) -> QuantizeJob:
    """Validate a job before any model is loaded (the options are ``plan_from_spec``'s).

    ``device`` auto takes CUDA when torch sees a GPU (the host service's jobs too); cuda without one
    is refused here, before any loading.
    """
    check_supported(model)  # before importing torch (device.py): a refusal takes milliseconds
    plan = plan_from_spec(spec, **options)
    if spec == "auto" and not (budget is not None and 0 < budget < 1):
        raise PlanError(
            f"plan auto needs a perplexity budget (--ppl-budget, ppl_budget) in (0, 1), e.g. 3%; got {budget}"
        )
    from edgellm.host.quantize.adapter import check_plan_fits  # torch: after the cheap checks
    from edgellm.host.quantize.device import choose_device

    check_plan_fits(plan, Path(model))  # the family's linears from config.json alone (meta device)
    on = str(choose_device(device))
    return QuantizeJob(
        model, plan, output, budget if spec == "auto" else None, evaluation or EvalConfig(), on
    )


def run_job(
    job: QuantizeJob, progress: Progress = quiet, loaded: LoadedModel | None = None
) -> dict[str, Any]:
    """Load the model (unless given), then build the plan or search for one; the result as JSON-ready data."""
    from edgellm.host.builder.loaded import LoadedModel
    from edgellm.host.builder.pipeline import build_artifact

    progress(0.0, "load: model and evaluation text")
    # A plan build streams the layers and quantizes in place: never the whole model in fp32 (issue 28).
    # The auto search builds many plans from one fp model.
    owned = loaded is None
    streamed = owned and job.budget is None
    loaded = loaded or LoadedModel.open(job.model, job.evaluation, job.device, streamed=streamed)
    if job.budget is not None:
        from edgellm.host.quantize.auto import search_plan

        return search_plan(loaded, job.plan, job.budget, job.output, progress=progress)
    consume = owned and loaded.stream is not None  # a checkpoint without safetensors loads whole
    return build_artifact(loaded, job.plan, job.output, progress=progress, consume=consume).summary()
