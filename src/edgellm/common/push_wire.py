"""PushArtifact's request messages on the wire, encoded and decoded without copying the chunk bytes.

Why not the generated protobuf classes: building a `FileChunk` copies its bytes into the message and
serialising copies them again; parsing copies them into the message and every read of `data`
copies them once more. At 1 MiB per chunk those copies cost more than the gRPC transport
(docs/benchmarks.md). Both ends speak exactly `edgellm.v1.ArtifactChunk`, so any protobuf
client can still push: the decoder reads fields in any order, skips unknown ones, and reports
malformed input as a message instead of raising, so the daemon can answer INVALID_ARGUMENT
rather than gRPC's generic "Exception deserializing request".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

# Field numbers of edgellm.v1.ArtifactChunk and edgellm.v1.FileChunk (protos/edgellm/v1/device.proto).
_MANIFEST, _CHUNK = 1, 2
_PATH, _OFFSET, _DATA = 1, 2, 3
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


_EMPTY = memoryview(b"")

# Why a cap: one 8 MiB message of 2-byte unknown fields used to become ~4.2 M Python tuples, a
# 7.75 s event-loop stall and +500 MiB RSS (review finding S7). An edgellm client sends 1 field
# per message and 3 per chunk; a newer client might add a few unknown ones, and a repeated known
# field (last wins) costs as much to walk as an unknown one, so the cap counts every field.
MAX_FIELDS = 64


@dataclass(frozen=True, slots=True)
class PushMessage:
    """One decoded ArtifactChunk: a manifest, a file chunk, or an error saying why it is malformed."""

    manifest_json: str | None = None
    path: str = ""
    offset: int = 0
    data: memoryview = _EMPTY
    is_chunk: bool = False
    error: str = ""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def encode_manifest(manifest_json: str) -> bytes:
    """The first message of a push: ArtifactChunk{manifest_json}."""
    raw = manifest_json.encode("utf-8")
    return _key(_MANIFEST, _LEN) + _varint(len(raw)) + raw


def encode_chunk(path: str, offset: int, data: bytes | bytearray | memoryview) -> bytes:
    """ArtifactChunk{chunk: FileChunk{path, offset, data}}, byte-identical to protobuf's own encoding."""
    raw_path = path.encode("utf-8")
    head = bytearray()
    if raw_path:
        head += _key(_PATH, _LEN) + _varint(len(raw_path)) + raw_path
    if offset:
        head += _key(_OFFSET, _VARINT) + _varint(offset)
    n = len(data)
    if n:
        head += _key(_DATA, _LEN) + _varint(n)
    outer = _key(_CHUNK, _LEN) + _varint(len(head) + n)
    return b"".join((outer, head, data))


class _Malformed(Exception):
    pass


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed("a truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        if shift == 63 and byte > 1:  # a 10th byte above 1 is past 2**64 (review finding I1)
            raise _Malformed("a varint over 64 bits")
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field, wire type, value or start, end) for each field in buf[pos:end], lazily.

    A generator (nothing is collected); more than MAX_FIELDS fields make the message malformed.
    """
    count = 0
    while pos < end:
        key, pos = _read_varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _Malformed("field number 0")
        count += 1
        if count > MAX_FIELDS:
            raise _Malformed(f"more than {MAX_FIELDS} fields (known or unknown) in one message")
        if wire == _VARINT:
            value, pos = _read_varint(buf, pos, end)
            yield field, wire, value, pos
        elif wire == _LEN:
            size, pos = _read_varint(buf, pos, end)
            if pos + size > end:
                raise _Malformed(f"field {field} claims {size} bytes but {end - pos} remain")
            yield field, wire, pos, pos + size
            pos += size
        elif wire in (_I64, _I32):
            pos += 8 if wire == _I64 else 4
            if pos > end:
                raise _Malformed(f"field {field} is truncated")
        else:
            raise _Malformed(f"wire type {wire} of field {field} is not valid protobuf")


def decode(raw: bytes) -> PushMessage:
    """Decode one ArtifactChunk; the chunk's data is a view into raw (no copy)."""
    try:
        return _decode(raw)
    except _Malformed as err:
        return PushMessage(error=f"malformed ArtifactChunk message: {err}")
    except UnicodeDecodeError as err:
        return PushMessage(error=f"malformed ArtifactChunk message: a string field is not UTF-8 ({err})")


def _decode(raw: bytes) -> PushMessage:
    manifest, chunk = _top_level(raw)
    if chunk is None:
        return PushMessage(manifest_json=manifest)
    return _chunk(raw, chunk)


def _top_level(raw: bytes) -> tuple[str | None, tuple[int, int] | None]:
    """The message's oneof: the manifest's text, or the span of its one FileChunk."""
    manifest: str | None = None
    chunk: tuple[int, int] | None = None
    for field, wire, a, b in _fields(raw, 0, len(raw)):
        if field == _MANIFEST and wire == _LEN:
            manifest, chunk = raw[a:b].decode("utf-8"), None  # a oneof: the last member set wins
        elif field == _CHUNK and wire == _LEN:
            if chunk is not None:
                raise _Malformed("more than one chunk in one message")
            manifest, chunk = None, (a, b)
    return manifest, chunk


def _chunk(raw: bytes, span: tuple[int, int]) -> PushMessage:
    """The FileChunk at SPAN of RAW; its data is a view, not a copy."""
    path, offset, data = "", 0, _EMPTY
    view = memoryview(raw)
    for field, wire, a, b in _fields(raw, *span):
        if field == _PATH and wire == _LEN:
            path = raw[a:b].decode("utf-8")
        elif field == _OFFSET and wire == _VARINT:
            offset = a
        elif field == _DATA and wire == _LEN:
            data = view[a:b]
    return PushMessage(path=path, offset=offset, data=data, is_chunk=True)
