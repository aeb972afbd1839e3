"""The one adapter around llmexport 0.0.5: runs it out of process with its defects fixed.

Nothing else starts llmexport or opens ``_llmexport_runner.py``; docs/llmexport.md lists the
defects the runner works around.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

_RUNNER = Path(__file__).with_name("_llmexport_runner.py")
# What an export must contain, and its by-products the runtime never reads (a debug dump of the
# graph, which the weight carrier reads first, and absolute local paths): removed before shipping.
REQUIRED_FILES = ("config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok")
DROP_FILES = ("llm.mnn.json", "export_args.json")


class ExportFailed(RuntimeError):
    """llmexport exited non-zero or produced an incomplete artifact."""


def llmexport_dir() -> Path:
    """Directory of the installed llmexport package (holds its top-level ``utils``)."""
    spec = importlib.util.find_spec("llmexport")
    if spec is None or not spec.submodule_search_locations:
        raise ExportFailed("llmexport is not installed (host extra)")
    return Path(next(iter(spec.submodule_search_locations)))


def export_mnn(hf_dir: Path, dst: Path, flags: Sequence[str], *, log_dir: Path) -> Path:
    """Export ``hf_dir`` to an MNN artifact in ``dst`` with llmexport ``flags`` (quantization etc.)."""
    dst.mkdir(parents=True, exist_ok=True)
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
        *flags,
    ]  # fmt: skip
    log_path = log_dir / "llmexport.log"
    log.info("llmexport_start", dst=str(dst), flags=list(flags))
    with log_path.open("w") as out:
        # cwd=log_dir: llmexport appends to ./.export.log in the working directory.
        proc = subprocess.run(cmd, cwd=log_dir, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise ExportFailed(f"llmexport exited {proc.returncode}; log {log_path}:\n{tail}")
    for name in REQUIRED_FILES:
        if not (dst / name).is_file():
            raise ExportFailed(f"llmexport produced no {name} in {dst}; log {log_path}")
    log.info("llmexport_done", dst=str(dst))
    return dst


def drop_byproducts(dst: Path) -> None:
    """Remove the export's by-products once nothing needs them any more."""
    for name in DROP_FILES:
        (dst / name).unlink(missing_ok=True)


def check_exported_rope_theta(artifact_dir: Path, expected: float) -> float:
    """Raise ExportFailed unless the exporter used the model's rope theta."""
    llm_config = json.loads((artifact_dir / "llm_config.json").read_text())
    theta = llm_config.get("rope_theta")
    if not isinstance(theta, (int, float)) or abs(float(theta) - expected) > 1e-3 * expected:
        raise ExportFailed(f"exported rope theta {theta}, model has {expected}: RoPE would be wrong")
    return float(theta)
