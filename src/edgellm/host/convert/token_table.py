"""Build the artifact's token byte table from a Hugging Face tokenizer."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
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


# SentencePiece byte fallback: a byte that no piece covers is the token "<0xNN>" (Llama-2, Mistral,
# Phi-3, Gemma). Its text is one raw byte, not the six characters of its name.
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_pieces(tokenizer: Any) -> list[bytes]:
    """Exact bytes of every token id of a byte-level BPE (or sentencepiece) tokenizer."""
    vocab_size = len(tokenizer)
    tokens: list[str | None] = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    special = set(getattr(tokenizer, "all_special_tokens", []))
    decoder = _byte_decoder()
    return [_piece(tok, special, decoder) for tok in tokens]


def _piece(tok: str | None, special: set[str], decoder: dict[str, int]) -> bytes:
    """One token's bytes: special text as is, byte fallback as its byte, else byte-level or sentencepiece."""
    if tok is None:
        return b""
    if tok in special:
        return tok.encode("utf-8")
    fallback = _BYTE_FALLBACK.fullmatch(tok)
    if fallback:
        return bytes([int(fallback.group(1), 16)])
    if all(ch in decoder for ch in tok):
        return bytes(decoder[ch] for ch in tok)
    return tok.replace("▁", " ").encode("utf-8")  # a sentencepiece piece: "▁" marks a space


# Text the token table must reproduce beyond ASCII: accents, an emoji (4 UTF-8 bytes, split over
# byte tokens by most vocabularies), CJK, a newline and a tab.
ROUND_TRIP_TEXT = "Naïve café, 🦊 fox!\n東京\tdone."


def check_round_trip(tokenizer: Any, pieces: list[bytes], texts: Sequence[str]) -> str | None:
    """The first of TEXTS whose tokens' bytes are not the text's UTF-8 bytes, or None.

    A sentencepiece tokenizer prefixes the first word with "▁" (one space) that the text never
    had; that one leading space is allowed.
    """
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        joined, want = b"".join(pieces[i] for i in ids), text.encode("utf-8")
        if joined != want and joined != b" " + want:
            return text
    return None


def write_for_tokenizer(tokenizer: Any, out_dir: Path) -> Path:
    """Write tokens.bin for tokenizer into out_dir and return its path."""
    path = out_dir / FILENAME
    write_token_table(token_pieces(tokenizer), path)
    return path


# The tokens that end a turn in each family's chat format, stop tokens whatever the eos lists say:
# ChatML (Qwen, SmolLM) <|im_end|>; Llama-3 <|eot_id|> and <|eom_id|> (3.1+, after a tool call);
# Gemma <end_of_turn>; Phi-3/3.5/4-mini <|end|>; GPT-2-style <|endoftext|>.
TURN_END_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>")


def stop_token_ids(tokenizer: Any, model_dir: Path) -> list[int]:
    """Token ids that end a turn: config/generation_config EOS (an id or a list) plus the turn-end markers.

    Why not just tokenizer.eos_token_id: transformers' GGUF loader sets SmolLM2's eos_token to
    <|im_start|> (id 1) while the model config says <|im_end|> (id 2); and Llama-3.x lists three
    ids in generation_config.json (<|end_of_text|>, <|eom_id|>, <|eot_id|>).
    """
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        path = model_dir / name
        if path.exists():
            eos = json.loads(path.read_text()).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
    vocab = tokenizer.get_vocab()
    ids.update(int(vocab[marker]) for marker in TURN_END_MARKERS if marker in vocab)
    return sorted(ids)
