"""A fake artifact directory: a schema-2 manifest, an empty MNN config and a tiny byte-level token table.

It holds no weights: only `FakeEngine` can "load" it. Its vocabulary is three ChatML specials,
the 256 single bytes (so any text encodes) and a few whole words; optionally more special tokens
after those (`added`: a model's call tags, such as Mistral's `[TOOL_CALLS]`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import tokenizers

from edgellm.common.manifest import MANIFEST, ModelShape, Tokenizer
from edgellm.common.runtime import Runtime
from edgellm.common.sampling_defaults import SamplingDefaults
from edgellm.common.token_table import FILENAME as TOKEN_TABLE
from edgellm.common.token_table import write_token_table
from edgellm.host.builder.pipeline import HF_TOKENIZER
from edgellm.host.convert.token_table import _byte_decoder
from tests.manifests import manifest_for

SPECIALS = (b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>")
WORDS = tuple(
    w.encode()
    for w in (" Paris", " capital", " France", " the", " of", " is", " The", " river", " sea", "assistant")
)
PIECES: tuple[bytes, ...] = (*SPECIALS, *(bytes([b]) for b in range(256)), *WORDS)
END_OF_TEXT, IM_START, IM_END = 0, 1, 2
STOP_IDS = (END_OF_TEXT, IM_END)


def write_hf_tokenizer(path: Path, added: tuple[str, ...] = ()) -> None:
    """A byte-level tokenizers JSON for the fake vocabulary (llguidance reads only its token bytes)
    with ADDED special tokens after it."""
    byte_char = {b: ch for ch, b in _byte_decoder().items()}
    vocab = {"".join(byte_char[b] for b in piece): i for i, piece in enumerate(PIECES)}
    specials = (*(s.decode() for s in SPECIALS), *added)
    ids = (*range(len(SPECIALS)), *range(len(PIECES), len(PIECES) + len(added)))
    for i, special in zip(ids, specials, strict=True):  # specials are literal text, not byte-level
        vocab[special] = i
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(s, special=True) for s in specials])
    path.write_text(tok.to_str(), encoding="utf-8")


def write_fake_artifact(
    root: Path,
    name: str = "fake-model",
    context_length: int = 2048,
    runtime: Runtime | None = None,
    hf_tokenizer: bool = False,
    sampling: SamplingDefaults | None = None,
    chat_template: dict[str, str] | None = None,
    added: tuple[str, ...] = (),
) -> Path:
    """Write the fake artifact into `root` (created), with `runtime` as its MNN settings; return it.

    With `hf_tokenizer` it carries tokenizer.json too, as artifacts built for constrained output do;
    `sampling` is the model's recorded sampling defaults (None: none, as before they were recorded);
    `chat_template` is llm_config.json's `jinja` ({"chat_template", "bos", "eos"}) as llmexport writes it;
    `added` are special tokens after the fake vocabulary (ids len(PIECES), ...).
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text("{}\n")
    pieces = (*PIECES, *(a.encode() for a in added))
    write_token_table(pieces, root / TOKEN_TABLE)
    names = ["config.json", TOKEN_TABLE]
    if chat_template is not None:
        (root / "llm_config.json").write_text(json.dumps({"jinja": chat_template}), encoding="utf-8")
        names.append("llm_config.json")
    if hf_tokenizer:
        write_hf_tokenizer(root / HF_TOKENIZER, added)
        names.append(HF_TOKENIZER)
    files = {rel: (root / rel).read_bytes() for rel in names}
    # A tiny model shape, so memory admission and KV sizing have numbers to work with.
    shape = ModelShape(
        architecture="llama",
        vocab_size=len(pieces),
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
        tokenizer=Tokenizer(
            TOKEN_TABLE, "tokenizer.mtok", STOP_IDS, len(pieces), HF_TOKENIZER if hf_tokenizer else None
        ),
        runtime=runtime or Runtime(),
        sampling=sampling,
    )
    (root / MANIFEST).write_text(manifest.to_json())
    return root
