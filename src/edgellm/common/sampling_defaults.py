"""A model's sampling defaults: what a client sends for a sampling field its user left unset.

The host records them in the manifest (``sampling``), the daemon reports them in ArtifactInfo
(``sampling_defaults``), and the CLI and the gateway start from them. They are in SamplingParams'
terms (0 = off; temperature 0 = greedy), so they go on the wire as they are.

Where they come from (``origin``):
- ``generation_config``: the checkpoint's ``generation_config.json``, read as transformers'
  ``generate()`` reads it: without ``do_sample: true`` it decodes greedily (only
  ``repetition_penalty`` applies), and with it an absent temperature / top_k / top_p is
  transformers' own default, 1.0 / 50 / 1.0 (``GenerationConfig._get_default_generation_params``).
- ``transformers``: the checkpoint has no ``generation_config.json``: transformers' defaults, greedy.
- ``edgellm``: the bundled SmolLM2-135M-Instruct's measured defaults (BUNDLED_SMOLLM2, below); its
  GGUF carries no generation config, and these were tuned on it (edgellm.client.sampling).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

ORIGINS = ("generation_config", "transformers", "edgellm")
# transformers' own defaults for a sampling field its generation_config leaves out (transformers 5.17,
# GenerationConfig._get_default_generation_params): they apply only with do_sample true.
HF_TEMPERATURE = 1.0
HF_TOP_K = 50
HF_TOP_P = 1.0
_UINT32 = 2**32


@dataclass(frozen=True)
class SamplingDefaults:
    """SamplingParams' scalar fields (but the seed) as a model's makers or edgellm recommend them."""

    origin: str  # one of ORIGINS
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 0.0  # 0 or 1 = off
    min_p: float = 0.0  # 0 = off
    repetition_penalty: float = 0.0  # 0 or 1 = off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, got {self.origin!r}")
        if not 0 <= self.top_k < _UINT32:
            raise ValueError(f"top_k must be within 0..{_UINT32 - 1}, got {self.top_k}")
        for name, lo, hi in _RANGES:
            value = getattr(self, name)
            if not (math.isfinite(value) and lo <= value <= hi):
                raise ValueError(f"{name} must be between {lo:g} and {hi:g}, got {value}")

    def values(self) -> dict[str, float]:
        """The sampling fields as keyword arguments (GenerateParams.of, SamplingParams)."""
        fields = asdict(self)
        del fields["origin"]
        return fields


# Why these bounds: the gateway's and the CLI's own (temperature: OpenAI's 2 and more for the CLI).
_RANGES = (
    ("temperature", 0.0, 100.0),
    ("top_p", 0.0, 1.0),
    ("min_p", 0.0, 1.0),
    ("repetition_penalty", 0.0, 10.0),
    ("presence_penalty", -2.0, 2.0),
    ("frequency_penalty", -2.0, 2.0),
)

# Measured on the bundled SmolLM2-135M-Instruct (bench/bench_chat_defaults.py; why each value:
# edgellm.client.sampling). For that model only: other models take their own generation_config.
BUNDLED_SMOLLM2 = SamplingDefaults(
    origin="edgellm", temperature=0.2, top_p=0.5, repetition_penalty=1.0, frequency_penalty=0.7
)


def from_generation_config(doc: Mapping[str, Any] | None) -> SamplingDefaults:
    """The defaults transformers' ``generate()`` would use with this ``generation_config.json``.

    DOC None means the checkpoint has no such file. A field of the wrong type is a ValueError
    naming it.
    """
    if doc is None:
        return SamplingDefaults(origin="transformers")
    repetition = _number(doc, "repetition_penalty", 1.0)
    if doc.get("do_sample") is not True:  # transformers decodes greedily; the penalty still applies
        return SamplingDefaults(origin="generation_config", repetition_penalty=repetition)
    return SamplingDefaults(
        origin="generation_config",
        temperature=_number(doc, "temperature", HF_TEMPERATURE),
        top_k=int(_number(doc, "top_k", HF_TOP_K)),
        top_p=_number(doc, "top_p", HF_TOP_P),
        min_p=_number(doc, "min_p", 0.0),
        repetition_penalty=repetition,
    )


def _number(doc: Mapping[str, Any], key: str, default: float) -> float:
    """DOC[KEY] as a float (DEFAULT when absent or null)."""
    value = doc.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"generation_config.json: {key} must be a number, got {value!r}")
    if key == "top_k" and value != int(value):
        raise ValueError(f"generation_config.json: top_k must be an integer, got {value!r}")
    return float(value)
