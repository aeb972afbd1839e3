"""The client's sampling defaults: what `edgellm generate`, `chat` and `jobs` send unless told otherwise.

Why the client owns them: on the wire every SamplingParams field is explicit (proto3 zeros mean
"off": temperature 0 = greedy, repetition_penalty 0/1 = none), so a request means the same on
every daemon and in every test. The command line starts from these; the Python client sends
exactly what it is given (greedy unless told otherwise) and takes them as
`client.generate(..., **RECOMMENDED.sampling())`.

Chosen for the bundled SmolLM2-135M-Instruct on a tuning prompt set and checked on a held-out
one (bench/bench_chat_defaults.py, docs/benchmarks.md): the model card's temperature 0.2, a
nucleus of 0.5 and a frequency penalty of 0.7 on the answer's own tokens. Without a penalty,
greedy and low-temperature decoding repeat a poem's line to the end of the budget. A repetition
penalty (HF/llama.cpp style) also stops that, but it counts the prompt's tokens too and steers the
answer away from the question's words; and the card's top-p 0.9 keeps a French-sounding detour in
the nucleus ("What is the capital of France?" → "L'Étoile…" for 6 of 20 seeds; 0 of 20 at 0.5).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingDefaults:
    """Generation length and sampling values the client sends by default."""

    max_new_tokens: int = 256
    temperature: float = 0.2
    top_k: int = 0
    top_p: float = 0.5
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.7
    presence_penalty: float = 0.0

    def sampling(self) -> dict[str, float]:
        """The SamplingParams fields, as keyword arguments for DaemonClient.generate / build_request."""
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
        }


RECOMMENDED = SamplingDefaults()
