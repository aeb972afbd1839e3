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

from edgellm.client.params import GenerateParams

__all__ = ["RECOMMENDED"]

# Only the values that differ from the wire's: the budget, top_k, min_p and the presence penalty
# are GenerateParams' own defaults, written there once.
RECOMMENDED = GenerateParams(temperature=0.2, top_p=0.5, repetition_penalty=1.0, frequency_penalty=0.7)
