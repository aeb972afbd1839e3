"""The token byte table shipped in every artifact: token id → raw bytes, written on the host.

Why our own table: MNN's `tokenizer_decode(id)` returns a Python str built with
PyUnicode_FromString, which raises on a token holding half a UTF-8 character, so the device
cannot stream multi-byte text through it. The host knows each token's exact bytes.

Format (`tokens.bin`): magic b"EDGT", uint32 version=1, uint32 count, (count+1) little-endian
uint32 offsets, then the concatenated bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

MAGIC = b"EDGT"
VERSION = 1
FILENAME = "tokens.bin"


def write_token_table(pieces: Sequence[bytes], path: Path) -> None:
    """Write token byte strings (indexed by id) to path."""
    offsets = [0]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    with path.open("wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<II", VERSION, len(pieces)))
        f.write(struct.pack(f"<{len(offsets)}I", *offsets))
        f.write(b"".join(pieces))


class TokenTable:
    """Read-only token id → bytes lookup."""

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        if data[:4] != MAGIC:
            raise ValueError(f"{path}: not a token table (bad magic)")
        version, count = struct.unpack_from("<II", data, 4)
        if version != VERSION:
            raise ValueError(f"{path}: token table version {version}, expected {VERSION}")
        header = 12 + 4 * (count + 1)
        self._offsets = struct.unpack_from(f"<{count + 1}I", data, 12)
        self._blob = data[header:]
        if len(self._blob) != self._offsets[-1]:
            raise ValueError(f"{path}: truncated token table")
        self.size = int(count)

    def __len__(self) -> int:
        return self.size

    def bytes_of(self, token: int) -> bytes:
        """The raw bytes of one token (empty for an id outside the table)."""
        if not 0 <= token < self.size:
            return b""
        return self._blob[self._offsets[token] : self._offsets[token + 1]]
