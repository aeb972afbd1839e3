"""One tokenizer for every model of a comparison: the fp checkpoint's, else the first artifact's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def tokenizer_for(reference: Path | None, artifact: Path) -> Callable[[str], list[int]]:
    """``text -> ids`` (no special tokens) from the HF checkpoint, or from the MNN artifact's runtime."""
    if reference is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(reference))
        return lambda text: list(tok(text, add_special_tokens=False)["input_ids"])
    from edgellm.common.mnn_llm import MnnLlm

    llm = MnnLlm.open(artifact / "config.json", {"thread_num": 1})
    return llm.encode
