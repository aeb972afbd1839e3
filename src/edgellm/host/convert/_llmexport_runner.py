"""Subprocess entry point that runs llmexport 0.0.5 with its transformers-5 rope bug fixed.

Run only by ``llmexport_adapter`` with ``PYTHONPATH`` set to the llmexport package directory:
llmexport imports ``utils.*`` as a top-level package, so it cannot be imported in-process
without a ``sys.path`` hack. Not importable from library code on purpose.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _patch_rope_theta() -> None:
    """Make llmexport read rope theta from ``rope_parameters`` (transformers >= 5)."""
    # Why: llmexport maps `rope_theta` from the HF config's top level. transformers 5 moved
    # it into `config.rope_parameters["rope_theta"]` and drops the top-level attribute, so
    # llmexport falls back to 10000 (SmolLM2 uses 100000) and bakes the wrong RoPE
    # frequencies into the graph without any error.
    from utils.config import LlmConfig  # type: ignore[import-not-found]

    original = LlmConfig.from_pretrained.__func__

    def from_pretrained(cls: Any, /, path: str, **kwargs: Any) -> Any:
        config = original(cls, path, **kwargs)
        origin = getattr(config, "origin_config", None)
        params = getattr(origin, "rope_parameters", None)
        if not isinstance(params, dict) or any(isinstance(v, dict) for v in params.values()):
            return config  # per-layer-type rope (gemma4) is handled by llmexport itself
        if "rope_theta" in params and getattr(origin, "rope_theta", None) is None:
            config.rope_theta = float(params["rope_theta"])
        return config

    LlmConfig.from_pretrained = classmethod(from_pretrained)


def _block_mnn_telemetry() -> None:
    """Keep pymnn's converter from pip-installing a logging SDK and phoning home."""
    # Why: MNN.tools.mnnconvert imports MNN.tools.utils.log, which runs
    # `pip install -U aliyun-log-python-sdk` when it is missing and then uploads usage
    # logs (with /etc/machine-id). mnnconvert wraps that import in try/except, so a None
    # entry in sys.modules (import raises ImportError) turns the logger off cleanly.
    sys.modules["MNN.tools.utils.log"] = None  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    """Parse llmexport's own flags, export, then record the rope theta actually used."""
    _block_mnn_telemetry()
    _patch_rope_theta()
    from llmexport import LlmExporter, build_args

    parser = argparse.ArgumentParser(prog="llmexport")
    build_args(parser)
    args = parser.parse_args(argv)
    exporter = LlmExporter(args)
    exporter.export(args.export)
    # Why: llm_config.json does not record the RoPE base (it is baked into the graph), so
    # write the value the exporter's rotary module used; the adapter checks it.
    config_path = Path(args.dst_path) / "llm_config.json"
    llm_config = json.loads(config_path.read_text(encoding="utf-8"))
    llm_config["rope_theta"] = float(exporter.model.rotary.rope_theta)
    config_path.write_text(json.dumps(llm_config, ensure_ascii=False, indent=4), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
