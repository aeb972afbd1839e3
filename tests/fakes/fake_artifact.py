"""A fake artifact directory: a manifest, an empty MNN config and a tiny byte-level token table.

It holds no weights: only `FakeEngine` can "load" it. Its vocabulary is three ChatML specials,
the 256 single bytes (so any text encodes) and a few whole words.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from edgellm.common.token_table import FILENAME as TOKEN_TABLE
from edgellm.common.token_table import write_token_table

SPECIALS = (b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>")
WORDS = tuple(
    w.encode()
    for w in (" Paris", " capital", " France", " the", " of", " is", " The", " river", " sea", "assistant")
)
PIECES: tuple[bytes, ...] = (*SPECIALS, *(bytes([b]) for b in range(256)), *WORDS)
END_OF_TEXT, IM_START, IM_END = 0, 1, 2
STOP_IDS = (END_OF_TEXT, IM_END)


def write_fake_artifact(root: Path, name: str = "fake-model", context_length: int = 2048) -> Path:
    """Write the fake artifact into `root` (created); return it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text("{}\n")
    write_token_table(PIECES, root / TOKEN_TABLE)
    files = [
        {
            "path": rel,
            "size": (root / rel).stat().st_size,
            "sha256": hashlib.sha256((root / rel).read_bytes()).hexdigest(),
        }
        for rel in ("config.json", TOKEN_TABLE)
    ]
    manifest = {
        "format": 1,
        "name": name,
        "source": {"name": "fake (tests/fakes)"},
        # A tiny model shape, so memory admission and KV sizing have numbers to work with.
        "model": {
            "context_length": context_length,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "hidden_size": 64,
            "head_dim": 32,
        },
        "quantization": {"bits": 4, "block": 32},
        "tokenizer": {"stop_token_ids": list(STOP_IDS)},
        "files": files,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root
