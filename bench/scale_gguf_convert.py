"""llama.cpp's convert_hf_to_gguf.py for bench_scale's checkpoints, which carry SmolLM2's tokenizer.

Why a wrapper: the converter names a BPE tokenizer's pre-tokenizer by hashing the ids of a fixed
text, and SmolLM2's tokenizer as edgellm rebuilds it from the bundled GGUF (then saved by
transformers 5) hashes to a70b913f…, which the converter does not list, so it refuses the
checkpoint. The bundled GGUF itself records `tokenizer.ggml.pre = smollm`, so an unrecognised hash
is mapped to that; the tokenizer does not change any speed or memory figure.

    python scale_gguf_convert.py LLAMA_SRC HF_DIR --outtype f16 --outfile OUT.gguf
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

PRE = "smollm"


def main() -> None:
    """Patch TextModel.get_vocab_base_pre, then run the converter as its own __main__."""
    src = Path(sys.argv[1])
    # The converter imports its `conversion` package from its own directory (run as a script).
    sys.path[:0] = [str(src), str(src / "gguf-py")]
    from conversion import base  # type: ignore[import-not-found]  # llama.cpp's source tree

    original = base.TextModel.get_vocab_base_pre

    def pre(self: Any, tokenizer: Any) -> str:
        try:
            return str(original(self, tokenizer))
        except NotImplementedError:
            return PRE

    base.TextModel.get_vocab_base_pre = pre
    _llama_takes_the_gpt2_vocab_path()
    _sentencepiece_families_take_the_gpt2_vocab_path()
    sys.argv = [str(src / "convert_hf_to_gguf.py"), *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


def _llama_takes_the_gpt2_vocab_path() -> None:
    """Make LlamaModel.set_vocab fall through to `_set_vocab_gpt2`, as a real Llama-3 does."""
    # Why: with SmolLM2's tokenizer.json the converter takes its LlamaHfVocab path, which writes
    # the tokenizer's 49,152 tokens and no padding, and llama.cpp then refuses the 128,256-row
    # token_embd ("wrong shape"). Real Llama-3 checkpoints reach `_set_vocab_gpt2` (the path the
    # converter comments "Llama 3"), which pads the list to config.json's vocab_size.
    from conversion import llama  # llama.cpp's source tree (on sys.path by main)

    def refuse(self: Any) -> None:
        raise TypeError("bench: use the gpt2 vocab path")

    llama.LlamaModel._set_vocab_llama_hf = refuse


def _sentencepiece_families_take_the_gpt2_vocab_path() -> None:
    """Gemma-2 and Phi-3 read SmolLM2's BPE tokenizer.json when the checkpoint has no tokenizer.model."""
    # Why: their set_vocab reads only a SentencePiece `tokenizer.model` (Gemma2Model through
    # `_set_vocab_sentencepiece`, Phi3MiniModel directly) and stops with "File not found" /
    # "Missing tokenizer.model" on the bench's checkpoints, which carry SmolLM2's BPE tokenizer.
    # `_set_vocab_gpt2` pads the token list to config.json's vocab_size as for Llama-3 above; the
    # tokenizer changes no weight, speed or memory figure (the vocabulary size is config.json's).
    from conversion import gemma, phi  # llama.cpp's source tree (on sys.path by main)

    for cls in (gemma.Gemma2Model, phi.Phi3MiniModel):
        original = cls.set_vocab

        def set_vocab(self: Any, original: Any = original) -> None:
            if (self.dir_model / "tokenizer.model").is_file():
                original(self)
            else:
                self._set_vocab_gpt2()

        cls.set_vocab = set_vocab


if __name__ == "__main__":
    main()
