"""Build the artifact's token byte table from a Hugging Face tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgellm.common.token_table import FILENAME, write_token_table


def _byte_decoder() -> dict[str, int]:
    """GPT-2's reversible byte ↔ printable-unicode map, inverted (unicode char → byte)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def token_pieces(tokenizer: Any) -> list[bytes]:
    """Exact bytes of every token id of a byte-level BPE (or sentencepiece) tokenizer."""
    vocab_size = len(tokenizer)
    tokens: list[str | None] = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    special = set(getattr(tokenizer, "all_special_tokens", []))
    decoder = _byte_decoder()
    pieces: list[bytes] = []
    for tok in tokens:
        if tok is None:
            pieces.append(b"")
        elif tok in special or not all(ch in decoder for ch in tok):
            # Special tokens (and sentencepiece pieces) are literal text; "▁" marks a space.
            pieces.append(tok.replace("▁", " ").encode("utf-8"))
        else:
            pieces.append(bytes(decoder[ch] for ch in tok))
    return pieces


def write_for_tokenizer(tokenizer: Any, out_dir: Path) -> Path:
    """Write tokens.bin for tokenizer into out_dir and return its path."""
    path = out_dir / FILENAME
    write_token_table(token_pieces(tokenizer), path)
    return path


def stop_token_ids(tokenizer: Any, model_dir: Path) -> list[int]:
    """Token ids that end a turn: config/generation_config EOS plus the chat end markers.

    Why not just tokenizer.eos_token_id: transformers' GGUF loader sets SmolLM2's eos_token to
    <|im_start|> (id 1) while the model config says <|im_end|> (id 2).
    """
    import json

    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        path = model_dir / name
        if path.exists():
            eos = json.loads(path.read_text()).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
    vocab = tokenizer.get_vocab()
    for marker in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>"):
        if marker in vocab:
            ids.add(int(vocab[marker]))
    return sorted(ids)
