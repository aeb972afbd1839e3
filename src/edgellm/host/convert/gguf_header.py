"""What a GGUF file's header says, read without touching tensor data: its family and its precision.

A small parser of the GGUF layout (magic, counts, key/values, tensor infos; ggml/docs/gguf.md)
skips the values it does not need, so these answers cost milliseconds even for a 5 GB file with a
150k-token vocabulary (no torch, no transformers; ``gguf`` only for the type names).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# GGUF ``general.architecture`` -> the transformers model_type the checkpoint becomes. Only the
# architectures transformers' GGUF loader maps (GGUF_TO_TRANSFORMERS_MAPPING) that are also
# edgellm families; llama.cpp writes Mistral and SmolLM2 as "llama", Gemma-3 text as "gemma3".
GGUF_ARCHITECTURES: dict[str, str] = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "phi3": "phi3",
}
_FLOAT_TYPES = ("F32", "F16", "BF16", "F64")


def is_gguf(path: Path) -> bool:
    """Whether ``path`` is a file that starts with the GGUF magic."""
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


# GGUF value type -> byte size of the scalar types (spec: ggml/docs/gguf.md); 8 = string, 9 = array.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def _skip_value(f: BinaryIO, vtype: int) -> None:
    """Move past one value of type ``vtype``."""
    if vtype == _STRING:
        f.seek(struct.unpack("<Q", f.read(8))[0], 1)
    elif vtype == _ARRAY:
        item, count = struct.unpack("<IQ", f.read(12))
        if item in _SCALAR_BYTES:
            f.seek(_SCALAR_BYTES[item] * count, 1)
        else:
            for _ in range(count):
                _skip_value(f, item)
    else:
        f.seek(_SCALAR_BYTES[vtype], 1)


def _read_string(f: BinaryIO) -> str:
    return f.read(struct.unpack("<Q", f.read(8))[0]).decode("utf-8")


def _open_header(f: BinaryIO, path: Path) -> tuple[int, int]:
    """Check the magic; return (tensor count, key/value count)."""
    if f.read(4) != b"GGUF":
        raise ValueError(f"{path.name} is not a GGUF file")
    _version, tensors, kv_count = struct.unpack("<IQQ", f.read(20))
    return tensors, kv_count


def architecture(path: Path) -> str:
    """The GGUF ``general.architecture`` (e.g. "llama", "qwen3"), read from the first header entries."""
    # Why not GGUFReader: it parses every field, the tokenizer's 50k-150k tokens and merges
    # included: 2 s for a tiny Qwen3 on the dev box, over the refusal's 1 s budget. llama.cpp
    # writes general.architecture first, so this reads a few hundred bytes.
    with path.open("rb") as f:
        _, kv_count = _open_header(f, path)
        for _ in range(kv_count):
            key, vtype = _read_string(f), struct.unpack("<I", f.read(4))[0]
            if key == "general.architecture" and vtype == _STRING:
                return _read_string(f)
            _skip_value(f, vtype)
    raise ValueError(f"{path.name}: the GGUF header has no general.architecture")


def tensor_types(path: Path) -> list[int]:
    """The ggml type id of every tensor, from the tensor infos after the key/values (no data read)."""
    with path.open("rb") as f:
        tensors, kv_count = _open_header(f, path)
        for _ in range(kv_count):
            _read_string(f)
            _skip_value(f, struct.unpack("<I", f.read(4))[0])
        types = []
        for _ in range(tensors):
            _read_string(f)
            n_dims = struct.unpack("<I", f.read(4))[0]
            f.seek(8 * n_dims, 1)
            types.append(struct.unpack("<IQ", f.read(12))[0])  # type, data offset
        return types


@dataclass(frozen=True)
class GGUFPrecision:
    """How the weights are stored in a GGUF: tensor count per ggml type, and the dominant type."""

    counts: tuple[tuple[str, int], ...]  # (ggml type name, tensors), most tensors first

    @property
    def quantized(self) -> bool:
        """Whether any tensor is stored in a block-quantized type (Q4_K, Q8_0, ...)."""
        return any(name not in _FLOAT_TYPES for name, _ in self.counts)

    def summary(self) -> str:
        """E.g. "Q4_1: 210/272 tensors Q4_1, 61 F32, 1 Q8_0"."""
        total = sum(n for _, n in self.counts)
        (main, main_n), *rest = self.counts
        tail = "".join(f", {n} {name}" for name, n in rest)
        return f"{main}: {main_n}/{total} tensors {main}{tail}"


def precision(path: Path) -> GGUFPrecision:
    """Count the GGUF's tensors by storage type (header only)."""
    from gguf import GGMLQuantizationType

    counts = Counter(GGMLQuantizationType(t).name for t in tensor_types(path))
    # Quantized types first: a 1-D norm kept in F32 says nothing about the weights' precision.
    ranked = sorted(counts.items(), key=lambda kv: (kv[0] in _FLOAT_TYPES, -kv[1], kv[0]))
    return GGUFPrecision(tuple(ranked))


def source_notice(model: str) -> str | None:
    """The one-line warning for a user's quantized GGUF file (None for anything else)."""
    path = Path(model)
    if not (path.is_file() and is_gguf(path)):
        return None
    p = precision(path)
    if not p.quantized:
        return None
    return f"source GGUF is {p.summary()}: the artifact cannot be better than this source"
