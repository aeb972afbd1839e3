"""bench/scale_gguf_convert.py: llama.cpp's own converter takes Gemma-2 and Phi-3 checkpoints that carry
SmolLM2's BPE tokenizer (no SentencePiece tokenizer.model), the token list padded to config.json's vocabulary.

Needs llama.cpp's source (the llama-cpp-python sdist the bench venv is built from): EDGELLM_LLAMA_SRC,
else the checkout's .cache/bench-venvs path; skipped where neither exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_families import build_tiny

ROOT = Path(__file__).resolve().parents[2]
LLAMA_SRC = Path(
    os.environ.get(
        "EDGELLM_LLAMA_SRC", ROOT / ".cache/bench-venvs/src/llama_cpp_python-0.3.36/vendor/llama.cpp"
    )
)
VOCAB = 49408  # beyond SmolLM2's 49,152 tokens, as the bench's real-shape vocabularies are


@pytest.mark.skipif(not (LLAMA_SRC / "convert_hf_to_gguf.py").exists(), reason="no llama.cpp source")
@pytest.mark.parametrize("family", ["gemma2", "phi3"])
def test_sentencepiece_families_convert_with_the_bpe_tokenizer(family: str, tmp_path: Path) -> None:
    from gguf import GGUFReader

    hf = build_tiny(family, tmp_path / "hf", vocab_size=VOCAB)
    assert not (hf / "tokenizer.model").exists()
    out = tmp_path / "model.gguf"
    wrapper = ROOT / "bench/scale_gguf_convert.py"
    cmd = [sys.executable, str(wrapper), str(LLAMA_SRC), str(hf), "--outtype", "f16", "--outfile", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    fields = GGUFReader(str(out)).fields
    model = fields["tokenizer.ggml.model"]
    assert bytes(model.parts[model.data[0]]).decode() == "gpt2"
    assert len(fields["tokenizer.ggml.tokens"].data) == VOCAB
