"""The one adapter around llmexport 0.0.5: runs it out of process with its defects fixed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from edgellm.host.convert.verify import EVAL_FILE

log = structlog.get_logger(__name__)

_RUNNER = Path(__file__).with_name("_llmexport_runner.py")
# Export by-products that the runtime never reads (debug graph dump, local paths).
_DROP_FILES = ("llm.mnn.json", "export_args.json")


@dataclass(frozen=True)
class ExportSettings:
    """Quantization flags passed to llmexport (RTN; block 0 means per-channel)."""

    bits: int = 4
    block: int = 32
    lm_bits: int = 8
    lm_block: int = 32
    calib_data: Path | None = None

    def to_args(self) -> list[str]:
        """llmexport command-line flags for these settings."""
        args = [
            "--quant_bit", str(self.bits),
            "--quant_block", str(self.block),
            "--lm_quant_bit", str(self.lm_bits),
            "--lm_quant_block", str(self.lm_block),
        ]  # fmt: skip
        if self.calib_data is not None:
            args += ["--calib_data", str(self.calib_data)]
        return args


class ExportFailed(RuntimeError):
    """llmexport exited non-zero or produced an incomplete artifact."""


def validate_settings(settings: ExportSettings, input_widths: Iterable[int]) -> None:
    """Refuse bit widths and block sizes that MNN would turn into a broken artifact."""
    widths = sorted(set(input_widths))
    for name, bits in (("bits", settings.bits), ("lm_bits", settings.lm_bits)):
        if bits not in (4, 8):
            raise ValueError(f"{name} must be 4 or 8, got {bits}")
    for name, block in (("block", settings.block), ("lm_block", settings.lm_block)):
        if block < 0:
            raise ValueError(f"{name} must be >= 0 (0 = per-channel), got {block}")
        bad = [w for w in widths if block and w % block]
        if bad:
            valid = sorted({b for b in (16, 32, 64, 128, 256) if all(w % b == 0 for w in widths)})
            raise ValueError(
                f"{name} {block} does not divide the linear input width(s) {bad}; "
                f"valid here: 0 (per-channel) or {valid}"
            )
    if settings.calib_data is not None and Path(settings.calib_data).name == EVAL_FILE:
        # Why: llmexport's calibrating methods default to the WikiText-2 test split, the
        # text we measure perplexity on; calibrating on it would inflate the check.
        raise ValueError(f"calibration data must not be the evaluation split {EVAL_FILE}")


# Runtime keys written into the exported config.json, so the verification measures the path
# the device runs. dynamic_option 2 quantizes activations per weight block rather than per
# channel: with "memory": "low" (W4A8) it keeps SmolLM2's greedy answers on torch's tokens.
RUNTIME_DEFAULTS: dict[str, object] = {
    "memory": "low",
    "precision": "low",
    "dynamic_option": 2,
    "thread_num": 2,
}


def tune_runtime_config(artifact_dir: Path, overrides: dict[str, object] | None = None) -> dict[str, object]:
    """Write MNN runtime defaults into the artifact's config.json; return the resulting config."""
    import json

    path = artifact_dir / "config.json"
    config: dict[str, object] = json.loads(path.read_text())
    config.update(RUNTIME_DEFAULTS if overrides is None else overrides)
    path.write_text(json.dumps(config, indent=4) + "\n")
    return config


def llmexport_dir() -> Path:
    """Directory of the installed llmexport package (holds its top-level ``utils``)."""
    spec = importlib.util.find_spec("llmexport")
    if spec is None or not spec.submodule_search_locations:
        raise ExportFailed("llmexport is not installed (host extra)")
    return Path(next(iter(spec.submodule_search_locations)))


def export_mnn(
    hf_dir: Path, dst: Path, settings: ExportSettings, *, log_dir: Path, extra: Sequence[str] = ()
) -> Path:
    """Export ``hf_dir`` to an MNN artifact in ``dst``; ``extra`` are more llmexport flags."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # Why: llmexport's modules do `from utils.model import ...`, i.e. expect their own
    # directory on the import path; doing that in a child process keeps our sys.path clean.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(llmexport_dir()), env.get("PYTHONPATH")]))
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = [
        sys.executable, str(_RUNNER),
        "--path", str(hf_dir.resolve()),
        "--export", "mnn",
        "--dst_path", str(dst.resolve()),
        # Why: the default '../../../build/MNNConvert' is resolved against the cwd; an empty
        # path forces the pymnn converter that ships with the mnn wheel.
        "--mnnconvert", "",
        *settings.to_args(),
        *extra,
    ]  # fmt: skip
    log_path = log_dir / "llmexport.log"
    log.info("llmexport_start", dst=str(dst), args=settings.to_args())
    with log_path.open("w") as out:
        # cwd=log_dir: llmexport appends to ./.export.log in the working directory.
        proc = subprocess.run(cmd, cwd=log_dir, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ExportFailed(f"llmexport exited {proc.returncode}; log {log_path}:\n{tail}")
    for name in ("config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok"):
        if not (dst / name).is_file():
            raise ExportFailed(f"llmexport produced no {name} in {dst}; log {log_path}")
    for name in _DROP_FILES:
        (dst / name).unlink(missing_ok=True)
    log.info("llmexport_done", dst=str(dst))
    return dst


def check_exported_rope_theta(artifact_dir: Path, expected: float) -> float:
    """Raise ExportFailed unless the exporter used the model's rope theta."""
    llm_config = json.loads((artifact_dir / "llm_config.json").read_text())
    theta = llm_config.get("rope_theta")
    if not isinstance(theta, (int, float)) or abs(float(theta) - expected) > 1e-3 * expected:
        raise ExportFailed(f"exported rope theta {theta}, model has {expected}: RoPE would be wrong")
    return float(theta)
