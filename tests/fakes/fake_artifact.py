"""A fake artifact directory: a schema-2 manifest, an empty MNN config and a tiny byte-level token table.

It holds no weights: only `FakeEngine` can "load" it. Its vocabulary is three ChatML specials,
the 256 single bytes (so any text encodes) and a few whole words.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edgellm.common.manifest import MANIFEST, ModelShape, Tokenizer
from edgellm.common.runtime import Runtime
from edgellm.common.token_table import FILENAME as TOKEN_TABLE
from edgellm.common.token_table import write_token_table
from tests.manifests import manifest_for

SPECIALS = (b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>")
WORDS = tuple(
    w.encode()
    for w in (" Paris", " capital", " France", " the", " of", " is", " The", " river", " sea", "assistant")
)
PIECES: tuple[bytes, ...] = (*SPECIALS, *(bytes([b]) for b in range(256)), *WORDS)
END_OF_TEXT, IM_START, IM_END = 0, 1, 2
STOP_IDS = (END_OF_TEXT, IM_END)


def write_fake_artifact(
    root: Path, name: str = "fake-model", context_length: int = 2048, runtime: Runtime | None = None
) -> Path:
    """Write the fake artifact into `root` (created), with `runtime` as its MNN settings; return it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text("{}\n")
    write_token_table(PIECES, root / TOKEN_TABLE)
    files = {rel: (root / rel).read_bytes() for rel in ("config.json", TOKEN_TABLE)}
    # A tiny model shape, so memory admission and KV sizing have numbers to work with.
    shape = ModelShape(
        architecture="llama",
        vocab_size=len(PIECES),
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        head_dim=32,
        context_length=context_length,
        rope_theta=10000.0,
        tie_word_embeddings=True,
    )
    base = manifest_for(files, name)
    manifest = replace(
        base,
        source=replace(base.source, name="fake (tests/fakes)"),
        model=shape,
        tokenizer=Tokenizer(TOKEN_TABLE, "tokenizer.mtok", STOP_IDS, len(PIECES)),
        runtime=runtime or Runtime(),
    )
    (root / MANIFEST).write_text(manifest.to_json())
    return root
