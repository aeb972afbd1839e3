"""Domain results become messages by field name: a new same-named field cannot be forgotten."""

from __future__ import annotations

from dataclasses import fields

import pytest
from google.protobuf.message import Message

from edgellm.common.proto_fields import copied, shared_names
from edgellm.device.core.autotune import ThreadTrial, ThreadTuning
from edgellm.device.core.state import DaemonState, TelemetryFrame
from edgellm.device.generation import Stats
from edgellm.device.governor.capabilities import Capability
from edgellm.device.governor.capacity import CapacityState
from edgellm.device.governor.runtime import GovernorSnapshot
from edgellm.device.rpc.wire import governor_message, stats_message
from edgellm.v1 import device_pb2


def _unset(message: object) -> set[str]:
    every = {f.name for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]
    return every - {f.name for f, _ in message.ListFields()}  # type: ignore[attr-defined]


def test_every_stats_field_reaches_the_message() -> None:
    stats = Stats(**{f.name: i + 1 for i, f in enumerate(fields(Stats))})
    message = stats_message(stats)
    assert _unset(message) == set()
    assert message.repaired_tokens == stats.repaired_tokens and message.ttft_ms == stats.ttft_ms


def test_every_governor_field_reaches_the_message() -> None:
    snapshot = GovernorSnapshot(
        policy="thermal",  # type: ignore[arg-type]
        threads=2, cluster="big", power="normal", pacing_ms=1.5, setpoint_c=41.0, last_decision="hold",
        last_reason="cool", last_decision_unix=5.0,
        capabilities=(Capability("pacing", "actuator", True, "d"),),
        mode="m", thermal_headroom=0.5, frontier="f", model_tau_s=3.0, model_ambient_c=25.0, rung=1,
        capacity_tokens_per_second=0.5, capacity_floor_tokens_per_second=1.0,
        capacity_state=CapacityState.EXHAUSTED, capacity_basis="frontier", capacity_retry_after_s=120,
        refusing_generations=True,
    )  # fmt: skip
    message = governor_message(snapshot)
    assert _unset(message) == set()
    assert [(c.name, c.kind, c.live, c.detail) for c in message.capabilities] == [
        ("pacing", "actuator", True, "d")
    ]


@pytest.mark.parametrize(
    ("message_type", "source", "by_hand"),
    [
        # fields whose names or types differ: wire.status_message and wire.sample_message set them
        (
            device_pb2.DaemonStatus,
            DaemonState,
            # restored: only in `config reset`'s reply (client/commands/config.py), set by the servicer
            {
                "engine_state", "governor", "thread_tuning", "model", "context_tokens", "load_ms",
                "warmup_ms", "restored",
            },
        ),
        (
            device_pb2.TelemetrySample,
            TelemetryFrame,
            {
                "engine_state", "governor", "unix_time", "zones", "cores", "mem_available_bytes",
                "mem_total_bytes", "rss_bytes", "rss_peak_bytes", "process_cpu_seconds", "soc_celsius",
                "skin_celsius", "battery_celsius",
            },
        ),
        (device_pb2.ThreadTuning, ThreadTuning, {"trials", "measured_unix"}),
        (device_pb2.ThreadTrial, ThreadTrial, set()),
    ],
)  # fmt: skip
def test_a_message_field_is_copied_by_name_or_set_by_hand(
    message_type: type[Message], source: type, by_hand: set[str]
) -> None:
    """A new message field fails here until the domain type has it too or a mapping sets it by hand."""
    every = {f.name for f in message_type.DESCRIPTOR.fields}
    copied_by_name = shared_names(message_type, source)
    assert every - copied_by_name <= by_hand, every - copied_by_name - by_hand
    assert every <= copied_by_name | by_hand


def test_given_fields_win_and_skipped_ones_stay_unset() -> None:
    trial = ThreadTrial(
        threads=2, decode_tokens_per_second=9.0, prefill_tokens_per_second=50.0, contended=True
    )
    message = copied(device_pb2.ThreadTrial, trial, skip=("contended",), threads=4)
    assert (message.threads, message.decode_tokens_per_second, message.contended) == (4, 9.0, False)
    with pytest.raises(TypeError):
        copied(device_pb2.ThreadTrial, object())
