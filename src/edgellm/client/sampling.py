"""The client's sampling defaults: what `edgellm generate`, `chat` and the gateway send unless told otherwise.

Why the client owns them: on the wire every SamplingParams field is explicit (proto3 zeros mean
"off": temperature 0 = greedy, repetition_penalty 0/1 = none), so a request means the same on
every daemon and in every test. The command line and the gateway start from the loaded model's
own defaults (`for_model`: ArtifactInfo.sampling_defaults, from its generation_config.json) and
fall back to RECOMMENDED for an artifact that records none; the Python client sends exactly what
it is given (greedy unless told otherwise) and takes them as `client.generate(..., **RECOMMENDED.sampling())`.

RECOMMENDED is the bundled SmolLM2's measured set (edgellm.common.sampling_defaults.BUNDLED_SMOLLM2,
which the host records in that model's manifest, so the daemon reports it too).

Chosen for the bundled SmolLM2-135M-Instruct on a tuning prompt set and checked on a held-out
one (bench/bench_chat_defaults.py, docs/benchmarks.md): the model card's temperature 0.2, a
nucleus of 0.5 and a frequency penalty of 0.7 on the answer's own tokens. Without a penalty,
greedy and low-temperature decoding repeat a poem's line to the end of the budget. A repetition
penalty (HF/llama.cpp style) also stops that, but it counts the prompt's tokens too and steers the
answer away from the question's words; and the card's top-p 0.9 keeps a French-sounding detour in
the nucleus ("What is the capital of France?" → "L'Étoile…" for 6 of 20 seeds; 0 of 20 at 0.5).
"""

from __future__ import annotations

from edgellm.client.params import GenerateParams
from edgellm.common.sampling_defaults import BUNDLED_SMOLLM2
from edgellm.v1 import common_pb2

__all__ = ["RECOMMENDED", "for_model"]

# Only the sampling values: the budget, the seed and speculation are GenerateParams' own defaults.
RECOMMENDED = GenerateParams.of(**BUNDLED_SMOLLM2.values())


def for_model(info: common_pb2.ArtifactInfo | None) -> GenerateParams:
    """The sampling a request starts from for this model: its recorded defaults, else RECOMMENDED.

    None (no model loaded) and an artifact built before defaults were recorded give RECOMMENDED,
    which is what every request got before: old artifacts and daemons answer as they did.
    """
    if info is None or not info.HasField("sampling_defaults"):
        return RECOMMENDED
    d = info.sampling_defaults
    return GenerateParams.of(**{name: getattr(d, name) for name in RECOMMENDED.sampling()})
