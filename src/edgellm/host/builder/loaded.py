"""An fp model loaded once for any number of builds: its source, tokenizer, evaluation tokens, calibration."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from edgellm.common.allocator import tune_for_streaming
from edgellm.common.manifest import ModelShape, Source
from edgellm.host.builder.source import checkpoint, model_shape, resolve_source
from edgellm.host.evaluate.evaluate import EvalConfig, take_tokens
from edgellm.host.quantize.adapter import adapter_for
from edgellm.host.quantize.families import check_supported, torch_attention
from edgellm.host.quantize.plan import Calibration, QuantPlan

if TYPE_CHECKING:
    from edgellm.host.builder.streamed import LayerStream

T = TypeVar("T")
log = structlog.get_logger(__name__)


def load_model(hf_dir: Path) -> tuple[Any, Any]:
    """fp32 model (in eval mode) and tokenizer of a Hugging Face checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32, **torch_attention(hf_dir))
    model.eval()  # type: ignore[no-untyped-call]
    return model, load_tokenizer(hf_dir)


def load_tokenizer(hf_dir: Path) -> Any:
    """The checkpoint's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(hf_dir))


def _open_stream(hf_dir: Path) -> LayerStream | None:
    """A streamed model of ``hf_dir``, or None when its layers cannot be read one at a time."""
    from edgellm.host.builder.streamed import open_streamed, streamable

    if not streamable(hf_dir):
        log.info("stream_unavailable", reason="no safetensors shards", hf_dir=str(hf_dir))
        return None
    try:
        _, stream = open_streamed(hf_dir)
    except KeyError as exc:
        log.info("stream_unavailable", reason=str(exc), hf_dir=str(hf_dir))
        return None
    return stream


@dataclass
class LoadedModel:
    """The fp model a build quantizes, with what builds share: tokens, calibration, memoised work."""

    source: Source
    hf_dir: Path
    model: Any
    tokenizer: Any
    evaluation: EvalConfig
    device: str = "cpu"  # where quantization computes (quantize/device.py), resolved already
    stream: LayerStream | None = None  # set when the decoder layers are read one at a time
    _calibration: dict[Calibration, Any] = field(default_factory=dict, repr=False)
    _memo: dict[Hashable, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def open(
        cls, model: str, evaluation: EvalConfig | None = None, device: str = "cpu", *, streamed: bool = False
    ) -> LoadedModel:
        """Resolve ``model`` ("default" or an HF checkpoint dir) and load it in fp32 (on the CPU).

        ``streamed``: only the parts outside the decoder layers are loaded; each layer is read from
        the safetensors shards when used (builder/streamed.py). Falls back to the whole model for a
        checkpoint whose tensor names transformers converts while loading.
        """
        check_supported(model)
        # Why: glibc's dynamic mmap threshold climbs to 32 MiB after the first large frees, so the
        # layer-sized temporaries that follow come from the heap and stay resident after `free`;
        # a fixed threshold maps them and unmaps them on free (docs/quantization.md, "Host memory
        # while converting"). The same policy as the daemon and the host service (allocator.py).
        tune_for_streaming()
        source = resolve_source(model)
        hf_dir = checkpoint(source)
        stream = _open_stream(hf_dir) if streamed else None
        if stream is None:
            fp, tokenizer = load_model(hf_dir)
        else:
            fp, tokenizer = stream.model, load_tokenizer(hf_dir)
        return cls(source, hf_dir, fp, tokenizer, evaluation or EvalConfig(), device, stream)

    @cached_property
    def eval_ids(self) -> list[int]:
        """The evaluation tokens (first ``evaluation.tokens`` of the evaluation text)."""
        ids = self.tokenizer(self.evaluation.text(), add_special_tokens=False)["input_ids"]
        return take_tokens(ids, self.evaluation.tokens)

    @cached_property
    def shape(self) -> ModelShape:
        """The manifest's model shape."""
        return model_shape(self.hf_dir)

    def calibration(self, plan: QuantPlan) -> Any:
        """Calibration ids [samples, seq_len] for the plan; None when every linear is RTN."""
        from edgellm.host.quantize.calibration import calibration_ids

        if all(s.method == "rtn" for s in adapter_for(self.model).resolve(plan, self.model).values()):
            return None
        if plan.calibration not in self._calibration:
            self._calibration[plan.calibration] = calibration_ids(self.tokenizer, plan.calibration)
        return self._calibration[plan.calibration]

    def memo(self, key: Hashable, build: Callable[[], T]) -> tuple[T, bool]:
        """``build()`` once per key for this model; returns (value, whether it was reused)."""
        if key in self._memo:
            return self._memo[key], True
        value = self._memo[key] = build()
        return value, False
