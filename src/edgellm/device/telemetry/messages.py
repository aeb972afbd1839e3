"""Telemetry and governor state as protobuf messages (kept out of the servicer)."""

from __future__ import annotations

from edgellm.device.governor.runtime import GovernorSnapshot
from edgellm.device.telemetry.source import Reading
from edgellm.v1 import device_pb2


def governor_message(g: GovernorSnapshot) -> device_pb2.GovernorState:
    """GovernorState from the governor's snapshot."""
    return device_pb2.GovernorState(
        policy=g.policy,
        threads=g.threads,
        cluster=g.cluster,
        power=g.power,
        pacing_ms=g.pacing_ms,
        setpoint_c=g.setpoint_c,
        last_decision=g.last_decision,
        last_reason=g.last_reason,
        last_decision_unix=g.last_decision_unix,
        rung=g.rung,
    )


def sample_message(
    r: Reading,
    governor: GovernorSnapshot,
    engine_state: device_pb2.EngineState.ValueType,
    tokens_per_second: float,
    last_ttft_ms: float,
) -> device_pb2.TelemetrySample:
    """One TelemetrySample: OS reading + engine + governor."""
    msg = device_pb2.TelemetrySample(
        unix_time=r.unix_time,
        zones=[device_pb2.ThermalZone(name=z.name, kind=z.kind, celsius=z.celsius) for z in r.zones],
        cores=[
            device_pb2.CoreFrequency(cpu=c.cpu, cluster=c.cluster, cur_khz=c.cur_khz, max_khz=c.max_khz)
            for c in r.cores
        ],
        mem_available_bytes=r.memory.available_bytes,
        mem_total_bytes=r.memory.total_bytes,
        rss_bytes=r.process.rss_bytes,
        rss_peak_bytes=r.process.rss_peak_bytes,
        engine_state=engine_state,
        tokens_per_second=tokens_per_second,
        last_ttft_ms=last_ttft_ms,
        governor=governor_message(governor),
        process_cpu_seconds=r.process.cpu_seconds,
    )
    if r.soc_c is not None:
        msg.soc_celsius = r.soc_c
    if r.skin_c is not None:
        msg.skin_celsius = r.skin_c
    if r.battery_c is not None:
        msg.battery_celsius = r.battery_c
    return msg
