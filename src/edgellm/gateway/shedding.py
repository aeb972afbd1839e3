"""Load shedding for a fleet: a hot phone answers 503 with Retry-After so a router goes elsewhere.

A router in front of several gateways (LiteLLM's proxy, docs/fleet.md) cools a deployment down
when it answers 503 or 429, for as long as its Retry-After says. The gateway sheds completion
requests, before any token is generated, while the device is hot: its governor has run out of
rungs and paces the coolest one (`GovernorState.duty` < 1), or Android forecasts SEVERE throttling
(`thermal_headroom` >= 1). Before either, a device whose thermal headroom is exhausted (the
decode rate it sustains under its comfort limit is below its floor, and its policy refuses work)
answers 503 `thermal_headroom_exhausted` with the daemon's own Retry-After. A full device queue is
the daemon's own refusal (RESOURCE_EXHAUSTED → 429 with Retry-After, errors.py); /health reports both.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.types import ASGIApp, Receive, Scope, Send

from edgellm.gateway.config import Shedding
from edgellm.gateway.device import DeviceWatch
from edgellm.gateway.errors import ApiError, send_error, thermal_error
from edgellm.gateway.limits import LIMITED_PATHS
from edgellm.v1 import device_pb2

SEVERE_HEADROOM = 1.0  # AThermal's forecast: 1.0 = THERMAL_STATUS_SEVERE
DUTY_EPS = 1e-3  # duties are rounded to 4 places on the device; 0.999 is still "paced"


def hot_reason(sample: device_pb2.TelemetrySample | None) -> str | None:
    """Why the device is too hot to take work (None when it is not, or when nobody knows)."""
    if sample is None:
        return None
    g = sample.governor
    if g.HasField("thermal_headroom") and g.thermal_headroom >= SEVERE_HEADROOM:
        return f"the OS forecasts severe thermal throttling (headroom {g.thermal_headroom:.2f})"
    if g.policy == "thermal" and g.HasField("duty") and g.duty < 1.0 - DUTY_EPS:
        skin = f", skin {sample.skin_celsius:.1f} °C" if sample.HasField("skin_celsius") else ""
        return (
            f"the governor has no cooler rung left and paces decode at duty {g.duty:.2f} "
            f"(setpoint {g.setpoint_c:.1f} °C{skin})"
        )
    return None


def exhausted_reason(sample: device_pb2.TelemetrySample | None) -> str | None:
    """Why the device refuses generations for want of thermal headroom (None when it does not)."""
    if sample is None:
        return None
    g = sample.governor
    if g.capacity_state != device_pb2.CAPACITY_STATE_THERMAL_HEADROOM_EXHAUSTED or not g.refusing_generations:
        return None
    return (
        f"thermal headroom exhausted: the device sustains {g.capacity_tokens_per_second:.2f} tok/s under "
        f"its {g.setpoint_c:.1f} °C comfort limit, below its floor of "
        f"{g.capacity_floor_tokens_per_second:.2f} tok/s"
    )


def shed_error(sample: device_pb2.TelemetrySample | None, shedding: Shedding) -> ApiError | None:
    """The 503 a device answers now, exhausted first (the daemon's retry hint), then hot (None: serve)."""
    exhausted = exhausted_reason(sample)
    if exhausted is not None and sample is not None:
        retry = sample.governor.capacity_retry_after_s or shedding.hot_retry_after_s
        return thermal_error(f"{exhausted}; retry after {retry} s or on another device", retry)
    hot = hot_reason(sample)
    return hot_error(hot, shedding.hot_retry_after_s) if hot is not None else None


def busy_reason(status: device_pb2.DaemonStatus | None) -> str | None:
    """Why the device queue takes no more work (from the cached status; the daemon decides per call)."""
    if status is None or not status.queue_capacity or status.queue_depth < status.queue_capacity:
        return None
    return f"the device queue is full ({status.queue_depth} of {status.queue_capacity} waiting)"


def hot_error(reason: str, retry_after_s: int) -> ApiError:
    """The 503 a hot device answers: OpenAI's shape, Retry-After for the router's cooldown."""
    return ApiError(
        503,
        f"the device is hot: {reason}; retry after {retry_after_s} s or on another device",
        code="device_hot",
        kind="service_unavailable",
        retry_after_s=retry_after_s,
    )


class ShedWhenHot:
    """ASGI middleware: completion requests get `hot_error` while the watched device is hot."""

    def __init__(
        self, app: ASGIApp, watch: DeviceWatch, shedding: Shedding, registry: CollectorRegistry
    ) -> None:
        self.app = app
        self.watch = watch
        self.shedding = shedding
        self.shed = Counter(
            "edgellm_gateway_shed_requests",
            "Completion requests refused because the device was hot (503 with Retry-After).",
            registry=registry,
        )
        hot = Gauge(
            "edgellm_device_hot",
            "1 while the device is hot (shed or not: --shed-when-hot).",
            registry=registry,
        )
        hot.set_function(lambda: 1.0 if self.watch.fresh and hot_reason(self.watch.sample) else 0.0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse with 503 while exhausted or hot (stale telemetry never sheds); pass everything else on."""
        if scope["type"] == "http" and scope["path"] in LIMITED_PATHS and self.shedding.when_hot:
            error = shed_error(self.watch.sample, self.shedding) if self.watch.fresh else None
            if error is not None:
                self.shed.inc()
                await send_error(send, error)
                return
        await self.app(scope, receive, send)
