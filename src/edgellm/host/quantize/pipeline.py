"""`edgellm quantize`: fp model -> plan applied in torch -> faithful MNN artifact -> measured quality."""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from edgellm.common.paths import cache_dir
from edgellm.host.evaluate.evaluate import EvalConfig, artifact_bytes, evaluate, take_tokens
from edgellm.host.evaluate.scorers import MnnScorer, Scorer, TorchScorer
from edgellm.host.quantize.adapter import adapter_for
from edgellm.host.quantize.apply import quantize_model
from edgellm.host.quantize.calibration import calibration_ids, calibration_path
from edgellm.host.quantize.export import export_artifact
from edgellm.host.quantize.grid import QuantizedWeight
from edgellm.host.quantize.manifest import write_manifest
from edgellm.host.quantize.plan import KV_MODES, QuantPlan

log = structlog.get_logger(__name__)
Progress = Callable[[float, str], None]


def _quiet(_f: float, _m: str) -> None:
    return None


@dataclass(frozen=True)
class QuantizeRequest:
    """One quantization job."""

    model: str  # "default" or a Hugging Face checkpoint directory
    plan: QuantPlan
    output: Path
    evaluation: EvalConfig = field(default_factory=EvalConfig)


def resolve_model_dir(model: str) -> Path:
    """A Hugging Face checkpoint directory for ``model`` ("default" = the embedded SmolLM2)."""
    if model != "default":
        path = Path(model)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a Hugging Face checkpoint (no config.json)")
        return path
    from edgellm.host.convert.default_model import default_source
    from edgellm.host.convert.gguf_to_hf import gguf_to_hf

    source = default_source()
    return gguf_to_hf(source.path, cache_dir() / "hf" / f"smollm2-{source.sha256[:12]}")


def load_model(hf_dir: Path) -> tuple[Any, Any]:
    """fp32 model and tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32)
    model.eval()  # type: ignore[no-untyped-call]
    return model, AutoTokenizer.from_pretrained(str(hf_dir))


@dataclass
class Session:
    """A loaded fp model with its tokenizer, evaluation tokens and cached calibration ids."""

    hf_dir: Path
    model: Any
    tokenizer: Any
    eval_ids: list[int]
    evaluation: EvalConfig
    _calib: dict[Any, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, hf_dir: Path, evaluation: EvalConfig) -> Session:
        """Load the model and tokenize the evaluation text."""
        model, tok = load_model(hf_dir)
        ids = take_tokens(tok(evaluation.text(), add_special_tokens=False)["input_ids"], evaluation.tokens)
        return cls(hf_dir, model, tok, ids, evaluation)

    def calibration(self, plan: QuantPlan) -> Any:
        """Calibration ids for the plan (None when every layer is RTN)."""
        if all(plan.spec_for(n).method == "rtn" for n in adapter_for(self.model).linear_names(self.model)):
            return None
        key = plan.calibration
        if key not in self._calib:
            self._calib[key] = calibration_ids(self.tokenizer, key)
        return self._calib[key]

    def build(self, plan: QuantPlan, output: Path, progress: Progress = _quiet) -> dict[str, Any]:
        """Quantize, export to ``output`` atomically, evaluate fp / torch / MNN; return the result."""
        start, cpu = time.perf_counter(), time.process_time()
        progress(0.0, "calibrate: tokenizing calibration text")
        calib = self.calibration(plan)
        qmodel = copy.deepcopy(self.model)
        qweights, scales = quantize_model(
            qmodel, plan, calib, lambda f, m: progress(0.05 + 0.6 * f, f"quantize: {m}")
        )
        cpu = time.process_time() - cpu  # all threads of this process: the wall time's contention-free twin
        result = self.publish(qmodel, plan, qweights, output, time.perf_counter() - start, scales, progress)
        return {**result, "quantize_cpu_seconds": round(cpu, 1)}

    def publish(
        self,
        qmodel: Any,
        plan: QuantPlan,
        qweights: dict[str, QuantizedWeight],
        output: Path,
        quant_s: float,
        scales: list[Any] | None = None,
        progress: Progress = _quiet,
    ) -> dict[str, Any]:
        """Export an already-quantized model to ``output`` atomically, evaluate it, write its manifest."""
        from edgellm.host.convert.token_table import stop_token_ids, write_for_tokenizer

        start = time.perf_counter() - quant_s
        scales = scales or []
        progress(0.65, "export: llmexport graph + carried integer weights")
        tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            report = export_artifact(qmodel, self.hf_dir, plan, qweights, adapter_for(qmodel), tmp)
            write_for_tokenizer(self.tokenizer, tmp)
            set_kv_mode(tmp, plan.kv_cache)
            export_s = time.perf_counter() - start - quant_s
            progress(0.8, "evaluate: fp, torch quantized and MNN")
            scorers: dict[str, Scorer] = {
                "fp": TorchScorer(self.model),
                "torch": TorchScorer(qmodel),
                "mnn": MnnScorer(tmp),
            }
            results = evaluate(
                self.eval_ids,
                scorers,
                self.evaluation,
                "fp",
                lambda f, m: progress(0.8 + 0.19 * f, f"evaluate: {m}"),
            )
            size = artifact_bytes(tmp)
            doc = self._manifest(plan, results, report.round_trip_exact, quant_s, export_s, size, scales)
            doc["tokenizer"] = {"stop_token_ids": stop_token_ids(self.tokenizer, self.hf_dir)}
            write_manifest(tmp, doc)
            if output.exists():
                shutil.rmtree(output)
            tmp.replace(output)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        progress(1.0, "done: artifact written")
        q = doc["quantization"]
        return {"artifact": str(output), "size_bytes": size, **q}

    def _manifest(
        self,
        plan: QuantPlan,
        results: dict[str, dict[str, float]],
        exact: bool,
        quant_s: float,
        export_s: float,
        size: int,
        scales: list[Any],
    ) -> dict[str, Any]:
        cfg = self.model.config
        calib = None
        if self.calibration(plan) is not None:
            path = calibration_path(plan.calibration)
            calib = {
                "file": str(path),
                "samples": plan.calibration.samples,
                "seq_len": plan.calibration.seq_len,
            }
        return {
            "name": self.hf_dir.name,
            "format": "mnn-llm",
            "model": {
                "architecture": cfg.model_type,
                "hidden_size": cfg.hidden_size,
                "num_layers": cfg.num_hidden_layers,
                "num_heads": cfg.num_attention_heads,
                "num_kv_heads": cfg.num_key_value_heads,
                "head_dim": cfg.hidden_size // cfg.num_attention_heads,
                "vocab_size": cfg.vocab_size,
                "context_length": cfg.max_position_embeddings,
            },
            "source": {"hf_dir": str(self.hf_dir)},
            "quantization": {
                "method": plan.method,
                "bits": plan.bits,
                "block": plan.block,
                "plan": plan.to_json(),
                "calibration": calib,
                "awq_ratios": [round(s.ratio, 3) for s in scales],
                "export": {"carried_integer_weights": True, "round_trip_exact": exact},
                "evaluation": {
                    "text": str(self.evaluation.text_file or "wikitext2-test.txt"),
                    "tokens": self.evaluation.tokens,
                    "context": self.evaluation.context,
                    "stride": self.evaluation.stride,
                    "results": results,
                },
                "size_bytes": size,
                "quantize_seconds": round(quant_s, 2),
                "export_seconds": round(export_s, 2),
            },
        }


# Why dynamic_option 2: with memory "low" MNN keeps weights packed and quantizes activations
# to int8 on the fly; its default granularity put SmolLM2 INT4-b64 at +3.0% perplexity over
# the identical torch weights (one 512-token window: 20.19 vs 19.61), option 2 at +0.7% (19.75),
# while "memory": "normal" (weights unpacked to floats, 4x the RAM) matches torch exactly.
RUNTIME_DEFAULTS: dict[str, Any] = {"memory": "low", "dynamic_option": 2}


def set_kv_mode(artifact: Path, kv_cache: str) -> None:
    """Write the runtime settings: KV-cache precision (MNN ``attention_mode`` 8/9/10) and activation quant."""
    path = artifact / "config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg.update(RUNTIME_DEFAULTS)
    cfg["attention_mode"] = KV_MODES[kv_cache]
    path.write_text(json.dumps(cfg, indent=4) + "\n", encoding="utf-8")


def quantize(request: QuantizeRequest, progress: Progress = _quiet) -> dict[str, Any]:
    """Run one quantization job end to end."""
    progress(0.0, "load: model and evaluation text")
    session = Session.open(resolve_model_dir(request.model), request.evaluation)
    return session.build(request.plan, request.output, progress)
