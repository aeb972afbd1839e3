"""edgellm.common.push_wire against the protobuf runtime: same bytes out, same fields in, clear errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from edgellm.common.push_wire import MAX_FIELDS, decode, encode_chunk, encode_manifest
from edgellm.common.pusher import PUSH_METHOD
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import start_server
from edgellm.v1 import device_pb2
from tests.manifests import manifest_for

CASES = [
    ("weights/llm.mnn.weight", 0, b"\x00\x01" * 700),
    ("a", 1, b"x"),
    ("ü/é.bin", (1 << 40) + 5, bytes(range(256)) * 3),
    ("empty", 7, b""),
    ("", 0, b"data with no path"),
]


@pytest.mark.parametrize(("path", "offset", "data"), CASES)
def test_encode_is_byte_identical_to_protobuf(path: str, offset: int, data: bytes) -> None:
    ref = device_pb2.ArtifactChunk(chunk=device_pb2.FileChunk(path=path, offset=offset, data=data))
    assert encode_chunk(path, offset, data) == ref.SerializeToString()
    assert encode_chunk(path, offset, memoryview(data)) == ref.SerializeToString()


def test_manifest_round_trips() -> None:
    text = '{"files": [], "name": "ünïcode"}'
    raw = encode_manifest(text)
    assert raw == device_pb2.ArtifactChunk(manifest_json=text).SerializeToString()
    msg = decode(raw)
    assert msg.manifest_json == text and not msg.is_chunk and not msg.error


@pytest.mark.parametrize(("path", "offset", "data"), CASES)
def test_decode_reads_protobuf_encoding_without_copying(path: str, offset: int, data: bytes) -> None:
    raw = device_pb2.ArtifactChunk(
        chunk=device_pb2.FileChunk(path=path, offset=offset, data=data)
    ).SerializeToString()
    msg = decode(raw)
    assert (msg.is_chunk, msg.path, msg.offset, bytes(msg.data), msg.error) == (True, path, offset, data, "")
    assert not data or msg.data.obj is raw  # a view into the received message


def test_decode_accepts_any_field_order_and_skips_unknown_fields() -> None:
    # FileChunk fields reversed, plus unknown varint (9), fixed64 (10), fixed32 (11) and bytes (12) fields.
    inner = (
        b"\x1a\x03abc" + b"\x10\x2a" + b"\x0a\x01p" + b"\x48\x01" + b"\x51" + bytes(8) + b"\x5d" + bytes(4)
    )
    raw = b"\x62\x02zz" + b"\x12" + bytes([len(inner)]) + inner
    msg = decode(raw)
    assert (msg.path, msg.offset, bytes(msg.data), msg.error) == ("p", 42, b"abc", "")
    parsed = device_pb2.ArtifactChunk.FromString(raw)  # the protobuf runtime agrees
    assert (parsed.chunk.path, parsed.chunk.offset, parsed.chunk.data) == ("p", 42, b"abc")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\x12\x05\x0a\x01", "claims 5 bytes"),
        (b"\x12\x04\x1a\x05ab", "claims 5 bytes"),
        (b"\x12\x01\x10", "varint"),
        (b"\x0a\x02\xff\xfe", "UTF-8"),
        (b"\x0b", "wire type 3"),
        (b"\x00", "field number 0"),
        (b"\x12\x00\x12\x00", "more than one chunk"),
        (b"\x10" + b"\xff" * 9 + b"\x02", "over 64 bits"),  # review finding I1
    ],
)
def test_malformed_messages_say_why(raw: bytes, why: str) -> None:
    msg = decode(raw)
    assert msg.error.startswith("malformed ArtifactChunk message") and why in msg.error


def test_a_varint_of_exactly_64_bits_still_decodes() -> None:
    raw = device_pb2.ArtifactChunk(chunk=device_pb2.FileChunk(path="p", offset=2**64 - 1)).SerializeToString()
    assert decode(raw).offset == 2**64 - 1


def test_s7_a_message_of_millions_of_unknown_fields_is_refused_at_the_cap_without_reading_on() -> None:
    """Finding S7: 8 MiB of 2-byte unknown fields took 5.6 s of CPU and ~4.2 M tuples to decode.

    The proof that decoding stops at the cap, without timing it: what follows field MAX_FIELDS + 1
    is 8 MiB of an unterminated varint, which a decoder that read on would report instead.
    """
    raw = b"\x48\x01" * (MAX_FIELDS + 1) + b"\xff" * (8 * 1024 * 1024)
    assert f"more than {MAX_FIELDS} fields" in decode(raw).error
    tail = decode(b"\x48\x01" * MAX_FIELDS + b"\xff" * 16).error  # the same tail after fewer fields
    assert tail.startswith("malformed ArtifactChunk message") and "more than" not in tail
    msg = decode(b"\x48\x01" * (4 * 1024 * 1024))  # field 9, varint 1: 4 Mi unknown fields, 8 MiB
    assert f"more than {MAX_FIELDS} fields" in msg.error
    inner = b"\x0a\x01p" + b"\x48\x01" * 100  # the cap holds inside a FileChunk too
    assert len(inner) == 203  # varint 203 = cb 01
    assert "more than" in decode(b"\x12\xcb\x01" + inner).error
    few = b"\x48\x01" * (MAX_FIELDS - 1) + encode_manifest("{}")  # a few unknown ones still pass
    assert decode(few).manifest_json == "{}"


async def test_daemon_answers_malformed_push_with_invalid_argument(tmp_path: Path) -> None:
    d = await start_server(
        DaemonConfig.of(port=0, data_dir=tmp_path / "data", disk_reserve_bytes=0, insecure_loopback=True)
    )
    try:

        def push_garbage() -> None:
            with grpc.insecure_channel(f"127.0.0.1:{d.port}") as ch:
                call: grpc.StreamUnaryMultiCallable[bytes, bytes] = ch.stream_unary(PUSH_METHOD)
                manifest = manifest_for({"a": b"abc"}).to_json()
                call(iter([encode_manifest(manifest), b"\x12\x09\x0a\x01"]), timeout=30)

        with pytest.raises(grpc.RpcError) as err:
            await asyncio.to_thread(push_garbage)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed ArtifactChunk" in str(err.value.details())
        assert d.core.store.installed() == []
    finally:
        await d.stop(0)
