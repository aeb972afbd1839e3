"""Device gauges: the daemon's telemetry, read once per period and cached, exposed on each scrape.

A scrape never reaches the phone's sensors: `DeviceWatch` holds one StreamTelemetry stream open
(one sample per period, read by the daemon once for every listener) plus one GetStatus per sample,
and `DeviceCollector` renders whatever it holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edgellm.client.aio import AioDaemon
from edgellm.common.logs import get_logger
from edgellm.common.periodic import BackgroundTask
from edgellm.gateway import upstream
from edgellm.v1 import device_pb2

log = get_logger(__name__)
RETRY_S = 2.0


class DeviceWatch:
    """Keeps the latest telemetry sample and daemon status (refreshed every period)."""

    def __init__(self, daemon: AioDaemon, period_s: float) -> None:
        self.daemon = daemon
        self.period_s = period_s
        self.sample: device_pb2.TelemetrySample | None = None
        self.status: device_pb2.DaemonStatus | None = None
        self.updated = 0.0  # monotonic time of the last sample
        self.samples = 0
        self._reader = BackgroundTask(self._run)

    def start(self) -> None:
        """Start the background reader on the running loop."""
        self._reader.start()

    async def stop(self) -> None:
        """Stop reading."""
        await self._reader.stop()

    @property
    def fresh(self) -> bool:
        """Whether the cached sample is recent (within three periods)."""
        return self.sample is not None and time.monotonic() - self.updated < 3 * self.period_s + 1

    async def _run(self) -> None:
        request = device_pb2.StreamTelemetryRequest(interval_ms=round(self.period_s * 1000))
        while True:
            try:
                call = self.daemon.stub.StreamTelemetry(request)
                async for sample in call:
                    self.status = await upstream.status(self.daemon)
                    self.sample = sample
                    self.updated = time.monotonic()
                    self.samples += 1
            except grpc.aio.AioRpcError as err:
                log.warning("telemetry_unavailable", code=err.code().name, details=err.details())
                why = await self.daemon.why_unreachable(err.details() or "")
                if why is not None:  # a squatter on the port, or a daemon whose certificate changed
                    log.warning("daemon_not_trusted", why=why)
            await asyncio.sleep(RETRY_S)


def _gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    g.add_metric(list((labels or {}).values()), value)
    return g


class DeviceCollector(Collector):
    """Renders DeviceWatch's cached sample and status as Prometheus metrics (no I/O)."""

    def __init__(self, watch: DeviceWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Metric]:
        """Metrics from fresh telemetry; while it is not (the daemon is down or restarting) only
        `edgellm_device_up 0`, the cached sample's age and `edgellm_model_loaded 0`.

        Why nothing else then: the last sample's gauges beside `device_up 0` said a model was
        loaded (and a temperature, a state) on a daemon nobody could reach.
        """
        w = self.watch
        fresh = w.fresh
        yield _gauge("edgellm_device_up", "1 while the daemon's telemetry is fresh.", 1.0 if fresh else 0.0)
        if w.sample is not None:
            yield _gauge(
                "edgellm_device_telemetry_age_seconds",
                "Age of the cached sample.",
                time.monotonic() - w.updated,
            )
        if fresh and w.sample is not None:
            yield from _sample_metrics(w.sample)
        if fresh and w.status is not None:
            yield from _status_metrics(w.status)
        else:
            yield _model_loaded(False)


def _sample_metrics(s: device_pb2.TelemetrySample) -> Iterator[Metric]:
    temps = GaugeMetricFamily(
        "edgellm_device_temperature_celsius", "SoC, skin, battery temperature.", labels=["sensor"]
    )
    for sensor in ("soc", "skin", "battery"):
        if s.HasField(f"{sensor}_celsius"):  # type: ignore[arg-type]
            temps.add_metric([sensor], getattr(s, f"{sensor}_celsius"))
    yield temps
    zones = GaugeMetricFamily(
        "edgellm_device_thermal_zone_celsius", "Thermal zones.", labels=["zone", "kind"]
    )
    for z in s.zones:
        zones.add_metric([z.name, z.kind], z.celsius)
    yield zones
    yield from _frequencies(s)
    yield _gauge("edgellm_device_memory_available_bytes", "MemAvailable.", s.mem_available_bytes)
    yield _gauge("edgellm_device_memory_total_bytes", "MemTotal.", s.mem_total_bytes)
    yield _gauge("edgellm_daemon_rss_bytes", "The daemon's resident set size.", s.rss_bytes)
    yield _gauge("edgellm_daemon_rss_peak_bytes", "The daemon's peak RSS (VmHWM).", s.rss_peak_bytes)
    cpu = CounterMetricFamily("edgellm_daemon_cpu_seconds", "CPU time the daemon used.")
    cpu.add_metric([], s.process_cpu_seconds)
    yield cpu
    yield _gauge("llamacpp:kv_cache_tokens", "KV cache tokens.", s.kv_tokens)
    yield _gauge(
        "edgellm_decode_tokens_per_second",
        "Live decode speed (else the last request's).",
        s.tokens_per_second,
    )
    yield _gauge(
        "edgellm_last_ttft_seconds", "The last request's time to first token.", s.last_ttft_ms / 1000
    )
    state = GaugeMetricFamily("edgellm_engine_state", "1 for the engine's current state.", labels=["state"])
    for name, value in device_pb2.EngineState.items():
        if value:
            state.add_metric(
                [name.removeprefix("ENGINE_STATE_").lower()], 1.0 if s.engine_state == value else 0.0
            )
    yield state
    throttled = CounterMetricFamily(
        "edgellm_governor_throttled_seconds", "Seconds the governor held the engine below its fastest rung."
    )
    throttled.add_metric([], s.throttled_seconds)
    yield throttled
    yield _gauge(
        "edgellm_governor_level",
        "The governor's rung: 0 = fastest, higher = slower and cooler.",
        s.governor.rung,
    )
    yield from _governor(s.governor)


def _frequencies(s: device_pb2.TelemetrySample) -> Iterator[Metric]:
    cur = GaugeMetricFamily(
        "edgellm_device_cluster_frequency_hertz", "Highest core clock per cluster.", labels=["cluster"]
    )
    top = GaugeMetricFamily(
        "edgellm_device_cluster_max_frequency_hertz", "Clock ceiling per cluster.", labels=["cluster"]
    )
    clusters: dict[int, tuple[int, int]] = {}
    for c in s.cores:
        k, m = clusters.get(c.cluster, (0, 0))
        clusters[c.cluster] = (max(k, c.cur_khz), max(m, c.max_khz))
    # A clock the device could not read is 0 on the wire: absent here, as Prometheus means
    # "unknown" (a 0 Hz series read as a stopped core; the CLI shows n/a for the same sample).
    for cluster, (khz, max_khz) in sorted(clusters.items()):
        if khz:
            cur.add_metric([str(cluster)], khz * 1000.0)
        if max_khz:
            top.add_metric([str(cluster)], max_khz * 1000.0)
    yield cur
    yield top


def _governor(g: device_pb2.GovernorState) -> Iterator[Metric]:
    yield _gauge("edgellm_governor_threads", "Inference threads the governor allows.", g.threads)
    if g.HasField("duty"):  # an older daemon does not say
        yield _gauge(
            "edgellm_governor_duty", "Decode duty cycle: 1 = unpaced, < 1 = out of rungs (hot).", g.duty
        )
    yield from _capacity(g)
    yield _gauge("edgellm_governor_pacing_seconds", "Pause between tokens.", g.pacing_ms / 1000)
    yield _gauge("edgellm_governor_setpoint_celsius", "The governor's temperature setpoint.", g.setpoint_c)
    yield _gauge(
        "edgellm_governor_last_decision_timestamp_seconds",
        "When the governor last decided.",
        g.last_decision_unix,
    )
    labels = {
        "policy": g.policy, "cluster": g.cluster, "power": g.power,
        "decision": g.last_decision, "reason": g.last_reason,
    }  # fmt: skip
    yield _gauge("edgellm_governor_info", "The governor's policy and last decision (value 1).", 1.0, labels)


def _capacity(g: device_pb2.GovernorState) -> Iterator[Metric]:
    """The sustainable decode rate (when known), its floor, and the exhausted state (docs/governor.md)."""
    if g.HasField("capacity_tokens_per_second"):  # unset: not estimated yet, or an older daemon
        yield _gauge(
            "edgellm_governor_capacity_tokens_per_second",
            "Decode rate the device sustains under its comfort limit (the governor's estimate).",
            g.capacity_tokens_per_second,
        )
    if g.capacity_state == device_pb2.CAPACITY_STATE_UNSPECIFIED:
        return
    yield _gauge(
        "edgellm_governor_capacity_floor_tokens_per_second",
        "Below this sustainable rate the device's thermal headroom is exhausted.",
        g.capacity_floor_tokens_per_second,
    )
    exhausted = g.capacity_state == device_pb2.CAPACITY_STATE_THERMAL_HEADROOM_EXHAUSTED
    yield _gauge(
        "edgellm_governor_thermal_headroom_exhausted",
        "1 while the sustainable decode rate is below the floor (refused under the comfort policy).",
        1.0 if exhausted else 0.0,
    )


def _model_loaded(loaded: bool) -> GaugeMetricFamily:
    return _gauge("edgellm_model_loaded", "1 while a model is loaded.", 1.0 if loaded else 0.0)


def _status_metrics(st: device_pb2.DaemonStatus) -> Iterator[Metric]:
    yield _gauge("edgellm_daemon_queue_depth", "Requests waiting on the device.", st.queue_depth)
    yield _gauge("edgellm_daemon_queue_capacity", "The device queue's capacity.", st.queue_capacity)
    yield _gauge("edgellm_daemon_uptime_seconds", "Daemon uptime.", st.uptime_seconds)
    served = CounterMetricFamily("edgellm_daemon_requests_served", "Generations the daemon finished.")
    served.add_metric([], st.requests_served)
    yield served
    loaded = st.HasField("model")
    yield _model_loaded(loaded)
    if loaded:
        labels = {
            "name": st.model.name,
            "artifact_id": st.model.artifact_id[:12],
            "quantization": st.model.quantization,
        }
        yield _gauge("edgellm_model_info", "The loaded model (value 1).", 1.0, labels)
        yield _gauge("edgellm_model_context_tokens", "The loaded model's context length.", st.context_tokens)
