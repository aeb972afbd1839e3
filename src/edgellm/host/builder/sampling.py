"""The sampling defaults a build records: the model's own, or the bundled SmolLM2's measured ones."""

from __future__ import annotations

import json
from pathlib import Path

from edgellm.common.errors import InvalidArgument
from edgellm.common.manifest import Source
from edgellm.common.sampling_defaults import BUNDLED_SMOLLM2, SamplingDefaults, from_generation_config
from edgellm.host.convert.default_model import DISTRIBUTION

GENERATION_CONFIG = "generation_config.json"


def sampling_defaults(source: Source, hf_dir: Path) -> SamplingDefaults:
    """BUNDLED_SMOLLM2 for the bundled default model, else what HF_DIR's generation_config.json says.

    Why the bundled model is special: its GGUF carries no generation config (the checkpoint
    transformers writes from it has none either), and edgellm's defaults were measured on it.
    """
    if source.package == DISTRIBUTION:
        return BUNDLED_SMOLLM2
    path = hf_dir / GENERATION_CONFIG
    if not path.is_file():
        return from_generation_config(None)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("expected a JSON object")
        return from_generation_config(doc)
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InvalidArgument(f"{path}: {err}") from err
