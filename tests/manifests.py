"""Valid artifact manifests for tests that push or store files which are not a real model."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

from edgellm.common.manifest import (
    SCHEMA_VERSION,
    ArtifactManifest,
    Build,
    FileEntry,
    ModelShape,
    Quantization,
    Source,
    Tokenizer,
)
from edgellm.common.runtime import Runtime

# SmolLM2-135M's shape: what admission and the KV cache read.
SHAPE = ModelShape(
    architecture="llama",
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
    context_length=8192,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)


def manifest_for(files: dict[str, bytes] | list[dict[str, Any]], name: str = "fake") -> ArtifactManifest:
    """A schema-valid manifest listing ``files`` (contents, or ready-made {path, size, sha256} entries)."""
    if isinstance(files, dict):
        entries = tuple(FileEntry(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items())
    else:
        entries = tuple(FileEntry(**e) for e in files)
    return ArtifactManifest(
        schema_version=SCHEMA_VERSION,
        name=name,
        created="2026-01-01T00:00:00+00:00",
        source=Source(name="fake", format="hf", path="/nowhere", sha256="0" * 64, hf_dir="/nowhere"),
        model=SHAPE,
        tokenizer=Tokenizer("tokens.bin", "tokenizer.mtok", (2,), 49152),
        quantization=Quantization(
            method="rtn",
            bits=4,
            block=32,
            lm_head_bits=8,
            lm_head_block=32,
            embedding_bits=8,
            plan={},
            round_trip_exact=True,
            exporter="none",
        ),
        runtime=Runtime(),
        build=Build(builder="test", tools={}, seconds={}),
        files=entries,
    )


def manifest_doc(files: dict[str, bytes] | list[dict[str, Any]], name: str = "fake") -> dict[str, Any]:
    """The JSON document of ``manifest_for`` (to tamper with before writing)."""
    doc: dict[str, Any] = json.loads(manifest_for(files, name).to_json())
    return doc


def renamed(manifest: ArtifactManifest, name: str) -> ArtifactManifest:
    """The same manifest under another name (so another artifact id)."""
    return replace(manifest, name=name)
