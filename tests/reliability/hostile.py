"""Hostile requests for every DeviceDaemon RPC, generated with Hypothesis, and a driver that sends them.

Each request is valid-shaped but hostile: a message built from the RPC's own descriptor with
random field values (extreme integers, NaN and infinities, unknown enum values, empty, huge,
control-character, path-traversal and bidi strings), then sometimes mutated on the wire (bytes
flipped, truncated, unknown or wrongly-typed fields appended), or plain random bytes. PushArtifact
gets whole malformed streams: manifests (valid-shaped with hostile fields, or not JSON at all),
chunks with hostile paths and offsets, and raw bytes. A share goes without a token or with a
wrong one. Why Hypothesis and not a hand-written generator: its strategies compose per field type,
a seed replays a run exactly, and it already favours the boundary values (0, -1, 2**63 - 1, "")
that break parsers.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import descriptor as pbd
from google.protobuf import message_factory
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from edgellm.common.push_wire import encode_chunk, encode_manifest
from edgellm.v1 import device_pb2

SERVICE = device_pb2.DESCRIPTOR.services_by_name["DeviceDaemon"]
METHODS: dict[str, pbd.MethodDescriptor] = {m.name: m for m in SERVICE.methods}

# Answers a hostile request may get. INTERNAL, UNKNOWN (an exception escaped a handler),
# UNIMPLEMENTED, UNAVAILABLE and DATA_LOSS are failures of the daemon, never of the request.
EXPECTED = frozenset(
    {
        "OK",
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "FAILED_PRECONDITION",
        "RESOURCE_EXHAUSTED",
        "DEADLINE_EXCEEDED",  # the fuzzer's own deadline on a valid Generate or telemetry stream
        "ALREADY_EXISTS",
        "OUT_OF_RANGE",
        "UNAUTHENTICATED",
        "PERMISSION_DENIED",
        "CANCELLED",
    }
)

# Seconds each RPC may take before the fuzzer gives up on it (DEADLINE_EXCEEDED, which also
# cancels the work on the daemon): long enough for a real answer, short enough for 10,000 calls.
TIMEOUT_S = {"Generate": 1.0, "StreamTelemetry": 0.3, "LoadModel": 60.0, "UpdateConfig": 60.0}

# How often each RPC is drawn. Why not uniform: an UnloadModel request is almost always valid (it
# has no fields), and each one costs a model reload (~3-9 s here) before Generate can be fuzzed
# again; a valid thread count in UpdateConfig reloads too. Those two are still sent, less often.
WEIGHTS = {"UnloadModel": 1, "UpdateConfig": 4, "LoadModel": 6, "PushArtifact": 20, "Generate": 20}
DEFAULT_WEIGHT = 10
RESTORE_EVERY = 25
_WEIGHTED = [m for m in sorted(METHODS) for _ in range(WEIGHTS.get(m, DEFAULT_WEIGHT))]
DEFAULT_TIMEOUT_S = 10.0

_F = pbd.FieldDescriptor
_INT_RANGES = {
    _F.TYPE_INT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _F.TYPE_UINT32: (0, 2**32 - 1),
    _F.TYPE_FIXED32: (0, 2**32 - 1),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _F.TYPE_UINT64: (0, 2**64 - 1),
    _F.TYPE_FIXED64: (0, 2**64 - 1),
}

NASTY_TEXT = [
    "",
    "default",
    "../../../../etc/passwd",
    "/etc/passwd",
    "manifest.json",
    "manifest.json.tmp",
    "0" * 64,
    "f" * 63,
    "a" * 129,
    "\x00",
    "\u202etxt.exe",
    "e\u0301",  # NFD
    "\x7f\x85",
    "con/../../x",
    "a/" * 200,
    "%s%n%x",
    '{"a":',
]


def text_values() -> st.SearchStrategy[str]:
    """Short random text, known-nasty strings, and huge ones (up to 1 MB)."""
    huge = st.builds(
        lambda ch, n: ch * n,
        st.sampled_from(["a", "\x00", "é", "\u202e", "/", "漢"]),
        st.sampled_from([256, 4097, 100_000, 1_000_000]),
    )
    return st.one_of(st.text(max_size=40), st.sampled_from(NASTY_TEXT), huge)


def _scalar(fd: pbd.FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    t = fd.type
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, 1, -1 if lo < 0 else 2]))
    if t == _F.TYPE_BOOL:
        return st.booleans()
    if t == _F.TYPE_FLOAT:
        return st.floats(width=32)
    if t == _F.TYPE_DOUBLE:
        return st.floats()
    if t == _F.TYPE_STRING:
        return text_values()
    if t == _F.TYPE_BYTES:
        return st.binary(max_size=64)
    if t == _F.TYPE_ENUM:
        return st.integers(-3, 40)  # proto3 enums are open: unknown values reach the handler
    assert t == _F.TYPE_MESSAGE and fd.message_type is not None
    return message_dicts(fd.message_type, depth + 1)


def message_dicts(desc: pbd.Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """A random subset of DESC's fields with random values (nested messages to depth 3)."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for fd in desc.fields:
        if fd.type == _F.TYPE_MESSAGE and depth >= 3:
            continue
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            key_fd, val_fd = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
            fields[fd.name] = st.dictionaries(_scalar(key_fd, depth), _scalar(val_fd, depth), max_size=8)
        elif fd.is_repeated:
            fields[fd.name] = st.lists(_scalar(fd, depth), max_size=5)
        else:
            fields[fd.name] = _scalar(fd, depth)
    return st.fixed_dictionaries({}, optional=fields)


def _fill(msg: Any, values: dict[str, Any]) -> None:
    desc = msg.DESCRIPTOR
    for name, value in values.items():
        fd = desc.fields_by_name[name]
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            target = getattr(msg, name)
            for k, v in value.items():
                if isinstance(v, dict):
                    _fill(target[k], v)
                else:
                    target[k] = v
        elif fd.is_repeated:
            target = getattr(msg, name)
            for v in value:
                if isinstance(v, dict):
                    _fill(target.add(), v)
                else:
                    target.append(v)
        elif isinstance(value, dict):
            _fill(getattr(msg, name), value)
            getattr(msg, name).SetInParent()
        else:
            setattr(msg, name, value)


def valid_shaped(desc: pbd.Descriptor) -> st.SearchStrategy[bytes]:
    """DESC filled with random values, serialized by protobuf itself."""
    cls = message_factory.GetMessageClass(desc)

    def build(values: dict[str, Any]) -> bytes:
        msg = cls()
        _fill(msg, values)
        return bytes(msg.SerializeToString())

    return message_dicts(desc).map(build)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """BASE with 1-3 wire-level mutations: flips, truncation, junk, unknown or wrongly-typed fields."""
    raw = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "field"]))
        if op == "flip" and raw:
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate" and raw:
            del raw[draw(st.integers(0, len(raw) - 1)) :]
        elif op == "insert":
            i = draw(st.integers(0, len(raw)))
            raw[i:i] = draw(st.binary(min_size=1, max_size=16))
        else:  # a field number the message may or may not have, with any wire type
            number, wire = draw(st.integers(1, 40)), draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7]))
            body = draw(st.binary(max_size=16))
            raw += _varint(number << 3 | wire) + (_varint(len(body)) + body if wire == 2 else body)
    return bytes(raw)


def request_bytes(desc: pbd.Descriptor) -> st.SearchStrategy[bytes]:
    """Half valid-shaped, a third mutated, the rest random bytes."""
    shaped = valid_shaped(desc)
    return st.one_of(shaped, shaped, shaped, mutated(shaped), mutated(shaped), st.binary(max_size=128))


def _file_entry() -> st.SearchStrategy[dict[str, Any]]:
    hexes = st.text("0123456789abcdef", min_size=64, max_size=64)
    return st.fixed_dictionaries(
        {
            "path": text_values(),
            "size": st.one_of(st.integers(-1, 2**70), st.sampled_from([0, 1, 2**40, 2**40 + 1])),
            "sha256": st.one_of(hexes, text_values()),
        }
    )


@st.composite
def manifest_texts(draw: st.DrawFn) -> str:
    """A manifest: the shape edgellm writes with hostile values, or JSON of another shape, or not JSON."""
    from tests.manifests import manifest_for

    kind = draw(st.sampled_from(["shaped", "shaped", "json", "text"]))
    if kind == "text":
        return draw(text_values())
    if kind == "json":
        leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20))
        nested = st.recursive(leaves, lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=20)
        value = draw(nested)
        return json.dumps(value)
    doc = json.loads(manifest_for({"w.bin": b"x"}, "fuzz").to_json())
    doc["files"] = draw(st.lists(_file_entry(), max_size=4))
    for key in draw(st.lists(st.sampled_from(sorted(doc)), max_size=3)):
        odd = st.one_of(st.none(), st.integers(), text_values(), st.lists(st.integers(), max_size=3))
        doc[key] = draw(odd)
    if draw(st.booleans()):
        doc["name"] = draw(text_values())
    return json.dumps(doc)


def push_messages() -> st.SearchStrategy[bytes]:
    """One ArtifactChunk on the wire: a manifest, a chunk with hostile fields, or raw bytes."""
    chunk = st.builds(
        lambda p, o, d: encode_chunk(p, o, d),
        text_values(),
        st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63])),
        st.binary(max_size=256),
    )
    return st.one_of(
        manifest_texts().map(encode_manifest),
        chunk,
        request_bytes(device_pb2.ArtifactChunk.DESCRIPTOR),
    )


@dataclass(frozen=True)
class HostileCall:
    """One RPC to send: method, the request messages as raw bytes, and which credentials to use."""

    method: str
    payloads: tuple[bytes, ...]
    auth: str  # "token", "none" or "wrong"


@st.composite
def hostile_calls(draw: st.DrawFn) -> HostileCall:
    """Any DeviceDaemon RPC with a hostile request; one call in ten without the right token."""
    method = draw(
        st.sampled_from([m for m in sorted(METHODS) for _ in range(WEIGHTS.get(m, DEFAULT_WEIGHT))])
    )
    if METHODS[method].client_streaming:
        payloads = tuple(draw(st.lists(push_messages(), max_size=5)))
    else:
        payloads = (draw(request_bytes(METHODS[method].input_type)),)
    auth = draw(st.sampled_from(["token"] * 18 + ["none", "wrong"]))
    return HostileCall(method, payloads, auth)


def send(channel: grpc.Channel, call: HostileCall) -> tuple[str, str]:
    """Send CALL on CHANNEL; (status code name, details)."""
    m = METHODS[call.method]
    path = f"/{SERVICE.full_name}/{call.method}"
    timeout = TIMEOUT_S.get(call.method, DEFAULT_TIMEOUT_S)
    try:
        if m.client_streaming:
            push: grpc.StreamUnaryMultiCallable[bytes, bytes] = channel.stream_unary(path)
            push(iter(call.payloads), timeout=timeout)
        elif m.server_streaming:
            stream: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(path)
            for _ in stream(call.payloads[0], timeout=timeout):
                pass
        else:
            unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
            unary(call.payloads[0], timeout=timeout)
    except grpc.RpcError as err:
        return err.code().name, err.details() or ""
    return "OK", ""


@dataclass
class FuzzReport:
    """What a fuzz run saw: answers per method and code, and every unexpected answer."""

    calls: int = 0
    codes: Counter[tuple[str, str]] = field(default_factory=Counter)
    unexpected: list[tuple[str, str, str]] = field(default_factory=list)  # method, code, details
    crashes: int = 0
    restores: int = 0  # LoadModel calls the driver made after a hostile UnloadModel
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        per_code: Counter[str] = Counter()
        for (_, code), n in self.codes.items():
            per_code[code] += n
        return {
            "calls": self.calls,
            "codes": dict(per_code.most_common()),
            "per_method": {f"{m} {c}": n for (m, c), n in sorted(self.codes.items())},
            "unexpected": self.unexpected[:20],
            "unexpected_count": len(self.unexpected),
            "crashes": self.crashes,
            "restores": self.restores,
            "seconds": round(self.seconds, 1),
        }


@dataclass
class FuzzTarget:
    """Channels to one daemon (with its token, none, a wrong one) and how to put its model back."""

    channels: dict[str, grpc.Channel]
    serving: Callable[[], str]  # the daemon's health: SERVING, NOT_SERVING or a code name
    restore: Callable[[], None]  # load the model again after a hostile UnloadModel
    alive: Callable[[], bool] = lambda: True


def run_fuzz(target: FuzzTarget, n: int, seed: int, report: FuzzReport | None = None) -> FuzzReport:
    """Send N hostile calls drawn by Hypothesis with SEED; record each answer in the report."""
    report = report or FuzzReport()
    t0 = time.monotonic()

    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(hostile_calls())
    def one(call: HostileCall) -> None:
        code, details = send(target.channels[call.auth], call)
        report.calls += 1
        report.codes[(call.method, code)] += 1
        if code not in EXPECTED:
            report.unexpected.append((call.method, code, details[:300]))
        if not target.alive():
            report.crashes += 1
            raise RuntimeError(f"the daemon died after {call.method}: {code} {details[:300]}")
        # The model is put back after an unload only every RESTORE_EVERY calls (a reload costs
        # seconds); calls in between meet a daemon without a model, which is a case too.
        if report.calls % RESTORE_EVERY == 0 and target.serving() != "SERVING":
            target.restore()
            report.restores += 1

    one()
    report.seconds += time.monotonic() - t0
    return report
