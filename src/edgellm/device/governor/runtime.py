"""The daemon's governor loop: telemetry reader -> controller -> actuators, plus remote control.

Only wiring lives here (STYLE 12): the controller is pure, the actuators are plain calls.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

from edgellm.common.errors import InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.common.periodic import BackgroundTask, every
from edgellm.device.governor.actuation import POWER_MODES, Actuation, GovernorPolicy, ThermalPolicy
from edgellm.device.governor.capabilities import Capability, survey
from edgellm.device.governor.capacity import (
    Capacity,
    CapacityConfig,
    CapacityEstimator,
    CapacityState,
    ThermalHeadroomExhausted,
    refuses,
)
from edgellm.device.governor.controller import Decision, GovernorConfig, ThermalController
from edgellm.device.governor.ladder import build_ladder
from edgellm.device.governor.platform import Platform
from edgellm.device.telemetry.source import Reading

log = get_logger(__name__)


@dataclass(frozen=True)
class GovernorUpdate:
    """A remote-control change (UpdateConfig); None leaves a field as it is."""

    policy: GovernorPolicy | None = None
    setpoint_c: float | None = None
    pacing_ms: float | None = None
    power: str | None = None
    cluster: str | None = None
    thermal_policy: ThermalPolicy | None = None

    @property
    def pins(self) -> bool:
        """Whether it pins an actuation (pacing, power or cluster), which switches the policy to pinned."""
        return self.pacing_ms is not None or self.power is not None or self.cluster is not None


@dataclass(frozen=True)
class GovernorSnapshot:
    """What telemetry and GetStatus show about the governor."""

    policy: GovernorPolicy
    threads: int
    cluster: str
    power: str
    pacing_ms: float
    setpoint_c: float
    last_decision: str
    last_reason: str
    last_decision_unix: float
    capabilities: tuple[Capability, ...] = ()
    mode: str = ""
    thermal_headroom: float | None = None
    frontier: str = ""
    model_tau_s: float = 0.0
    model_ambient_c: float = 0.0
    rung: int = 0  # ladder position in use (0 = fastest); `cluster` is its label
    duty: float = 1.0  # decode duty cycle in use; < 1 only past the coolest rung (out of rungs)
    # governor/capacity.py: the decode rate sustainable under the comfort limit (None: not known yet)
    capacity_tokens_per_second: float | None = None
    capacity_floor_tokens_per_second: float = 0.0
    capacity_state: CapacityState = CapacityState.UNKNOWN
    capacity_basis: str = ""
    capacity_retry_after_s: int = 0  # real seconds; 0 unless exhausted
    refusing_generations: bool = False  # exhausted under the comfort policy: Generate is refused
    thermal_policy: ThermalPolicy = ThermalPolicy.COMFORT


class GovernorRuntime:
    """Owns the controller and the actuators of the platform it was given (a phone, or a simulated one)."""

    def __init__(
        self,
        threads: int,
        config: GovernorConfig,
        platform: Platform,
        period_s: float,
        capacity: CapacityConfig | None = None,
    ) -> None:
        self.platform = platform
        self.capacity = CapacityEstimator(capacity)
        self.telemetry = self.platform.telemetry
        self.actuators = self.platform.actuators()
        self.headroom_value: float | None = None
        self.config = config
        self.startup_config = config  # what `reset` puts back
        self.threads = self.platform.ladder_threads(threads)
        self.period_s = period_s
        self._busy = False
        self.last: Decision | None = None
        self.last_reading: Reading | None = None
        self._pinned: Actuation | None = None
        self.throttled_seconds = 0.0  # time spent below the fastest rung (summed each period)
        self._seen_temperature = False  # see `blind`
        self._build()
        self._loop = BackgroundTask(lambda: every(self.period_s, self._step))
        log.info(
            "governor_ready",
            policy=config.policy,
            setpoint_c=self.setpoint_c,
            rungs=[r.describe() for r in self.ladder],
            platform=self.platform.name,
        )

    def _build(self) -> None:
        allowed = set(self.actuators.allowed)
        clusters = self.telemetry.cpu.clusters
        if clusters and allowed & {c for cl in clusters for c in cl.cpus}:
            self.ladder = self.platform.rungs(build_ladder(clusters, allowed, self.threads))
        else:  # no cpufreq topology readable: one rung on whatever we may run on
            cpus = tuple(sorted(allowed))
            self.ladder = [Actuation(self.threads, cpus, cpus, label="all")]
        self.setpoint_c = self.config.resolve_setpoint(self.telemetry.thermal.skin_trips_c())
        self.controller = ThermalController(self.config, self.ladder, self.setpoint_c)
        if not self._seen_temperature and self.config.policy == GovernorPolicy.THERMAL:
            self._seen_temperature = self.telemetry.read().control_c is not None
        self._apply_policy()

    def _apply_policy(self) -> None:
        policy = self.config.policy
        if policy == GovernorPolicy.OFF:
            self.actuators.set(None)
        elif policy == GovernorPolicy.PINNED:
            self.actuators.set(self._pinned or self.ladder[0])
        elif self.blind:
            self.actuators.set(self.ladder[0])
        else:
            self.actuators.set(self.controller.current)

    def _mode(self) -> str:
        """What status shows as the governor's mode (the policy when it is not the thermal one)."""
        if self.config.policy != GovernorPolicy.THERMAL:
            return str(self.config.policy)
        return "no temperature readable: not throttling" if self.blind else self.controller.components.mode

    @property
    def blind(self) -> bool:
        """Whether the thermal policy has had no temperature to read yet (nothing to control).

        Why the fastest rung then, not the coolest the controller starts on: without a reading it
        can never release, and a host or a phone that hides its thermal zones decoded at half speed
        for ever (the middle cluster: 72 against 132 tok/s on the 2-core build machine) to protect
        against heat nobody measures. The phone's firmware still throttles on its own sensors; the
        first reading hands control to the controller, from its cool start.
        """
        return not self._seen_temperature

    @property
    def busy(self) -> bool:
        """Whether the engine is generating (the daemon says so; the virtual phone's power uses it)."""
        return self._busy

    @property
    def allowed_cpus(self) -> tuple[int, ...]:
        """The cores the governor may place the engine on."""
        return self.actuators.allowed

    def tokens_per_second(self) -> float:
        """The live decode rate (0 when nothing was decoded lately)."""
        return self.actuators.tokens_per_second()

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """Around one request on the worker thread: the prefill cores first, busy until it ends.

        When it ends the process gets all its cores back until the next request (`Actuators.release`).
        """
        self.actuators.before_prefill()
        self._busy = True
        try:
            yield
        finally:
            self._busy = False
            self.actuators.release()

    def between_tokens(self) -> None:
        """After each decode step (the worker thread): the decode cores, pacing, any extra delay."""
        self.actuators.between_tokens()

    # -- loop --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the periodic loop on the running event loop."""
        self._loop.start()

    async def stop(self) -> None:
        """Stop the loop and give back what it changed: affinity, the ADPF session, frequency caps."""
        await self._loop.stop()
        self.actuators.restore()
        await self.platform.close()

    def _step(self, now: float, elapsed_s: float) -> None:
        if self.telemetry.battery is not None:
            self.telemetry.battery.maybe_refresh()
        self.tick(now, elapsed_s)

    def tick(self, now: float, elapsed_s: float) -> Decision | None:
        """One control period: let the platform's time pass, read, decide, actuate."""
        now = self.platform.advance(now, elapsed_s, self.busy, self.actuators.current)
        current = self.actuators.current
        if current is not None and current.rung > 0:
            self.throttled_seconds += elapsed_s
        reading = self.telemetry.read()
        self.last_reading = reading
        temp = reading.control_c
        if self.config.policy != GovernorPolicy.THERMAL or temp is None:
            return None
        if not self._seen_temperature:  # the first reading: the controller takes over (see `blind`)
            self._seen_temperature = True
            self.actuators.set(self.controller.current)
        self.headroom_value = self.platform.headroom.read()
        age = self.actuators.prefill_age_s()
        scale = self.platform.time_scale
        decision = self.controller(
            temp,
            now,
            die_c=reading.soc_c,
            headroom=self.headroom_value,
            tokens_per_second=self.actuators.tokens_per_second() if self.busy else 0.0,
            prefill_age_s=None if age is None else age * scale,
        )
        if decision is not None:
            self.last = replace(decision, at=time.time())
            self.actuators.set(decision.actuation)
            comp = decision.components
            log.info(
                "governor_decision",
                actuation=decision.actuation.describe(),
                reason=decision.reason,
                skin_c=round(comp.measured_c, 2),
                predicted_c=round(comp.predicted_c, 2),
                depth=round(comp.depth, 3),
                p=round(comp.p, 3),
                i=round(comp.i, 3),
            )
        self._estimate_capacity(now, reading, temp)
        return decision

    def _estimate_capacity(self, now: float, reading: Reading, skin_c: float) -> None:
        """Update the capacity estimate; log each change of state."""
        before = self.capacity.state
        gap = None if reading.soc_c is None else reading.soc_c - skin_c
        tps = self.actuators.tokens_per_second() if self.busy else 0.0
        ctl = self.controller
        cap = self.capacity.update(now, ctl.identifier.model, self.setpoint_c, gap, tps, ctl.frontier)
        if cap.state != before:
            log.info(
                "capacity_state",
                state=str(cap.state),
                was=str(before),
                tokens_per_second=None if cap.tokens_per_second is None else round(cap.tokens_per_second, 3),
                floor=self.capacity.config.floor_tokens_per_second,
                basis=cap.basis,
            )

    @property
    def refusing(self) -> bool:
        """Whether new generations are refused: thermal headroom exhausted under the comfort policy."""
        thermal = self.config.policy == GovernorPolicy.THERMAL
        return thermal and refuses(self.capacity.state, self.config.thermal_policy)

    def retry_after_s(self, cap: Capacity) -> int:
        """The capacity's retry hint in real seconds (the virtual phone's clock runs time_scale faster)."""
        if cap.retry_after_s <= 0:
            return 0
        return max(1, math.ceil(cap.retry_after_s / self.platform.time_scale))

    def admit(self) -> None:
        """Refuse a new generation (RESOURCE_EXHAUSTED with a retry hint) while `refusing`."""
        if not self.refusing:
            return
        cap = self.capacity.current
        retry = self.retry_after_s(cap)
        model = self.controller.identifier.model
        raise ThermalHeadroomExhausted(
            f"thermal headroom exhausted: this phone sustains {cap.tokens_per_second or 0.0:.2f} tok/s "
            f"under its {self.setpoint_c:.1f} °C comfort limit, below the floor of "
            f"{self.capacity.config.floor_tokens_per_second:.2f} tok/s (identified ambient "
            f"{model.ambient_c:.1f} °C); retry after {retry} s or on another device, cool the phone "
            "(a cooler room, out of its case, off the charger), or serve anyway with "
            "--thermal-policy throughput (the firmware then throttles)",
            retry,
        )

    # -- remote control ----------------------------------------------------------------------------
    def validate(self, change: GovernorUpdate) -> None:
        """Raise InvalidArgument for any bad field; changes nothing.

        setpoint_c's range is the daemon setting's own (`--setpoint`, device/config.py), checked by
        the core before this (`check_setting`).
        """
        if change.pacing_ms is not None and not 0.0 <= change.pacing_ms <= 1000.0:
            raise InvalidArgument(f"pacing_ms must be within 0..1000, not {change.pacing_ms}")
        if change.power is not None and change.power not in POWER_MODES:
            raise InvalidArgument(f"power must be one of {', '.join(POWER_MODES)}, not {change.power!r}")
        labels = [r.label for r in self.ladder]
        if change.cluster is not None and change.cluster not in labels:
            raise InvalidArgument(f"cluster must be one of {', '.join(labels)}, not {change.cluster!r}")

    def update(self, change: GovernorUpdate) -> None:
        """Change policy/setpoint or pin actuators (pinning switches the policy to `pinned`)."""
        self.validate(change)
        if change.setpoint_c is not None:
            self.config = replace(self.config, setpoint_c=change.setpoint_c)
        if change.thermal_policy is not None:
            self.config = replace(self.config, thermal_policy=change.thermal_policy)
        if change.policy is not None:
            self.config = replace(self.config, policy=change.policy)
        elif change.pins:
            self.config = replace(self.config, policy=GovernorPolicy.PINNED)
        if change.pins:
            self._pinned = self._pin(change)
        if change.setpoint_c is not None or change.policy is not None or change.thermal_policy is not None:
            self._build()
        else:
            self._apply_policy()
        log.info(
            "governor_update",
            policy=self.config.policy,
            thermal_policy=self.config.thermal_policy,
            setpoint_c=self.setpoint_c,
            pinned=change.pins,
        )

    def reset(self) -> None:
        """Back to the policy and setpoint it started with, unpinned (`edgellm config reset`)."""
        self.config = self.startup_config
        self._pinned = None
        self._build()
        log.info("governor_reset", policy=self.config.policy, setpoint_c=self.setpoint_c)

    def _pin(self, change: GovernorUpdate) -> Actuation:
        base = self._pinned or self.actuators.current or self.ladder[0]
        if change.cluster is not None:
            rung = next(r for r in self.ladder if r.label == change.cluster)
            base = replace(rung, pacing_ms=base.pacing_ms, power=base.power)
        return replace(
            base,
            pacing_ms=change.pacing_ms if change.pacing_ms is not None else base.pacing_ms,
            power=change.power if change.power is not None else base.power,
            duty=1.0,
        )

    def set_threads(self, threads: int) -> None:
        """Rebuild the ladder after the engine was reloaded with a new thread count."""
        self.threads = threads
        self._build()

    def snapshot(self) -> GovernorSnapshot:
        """The governor's state for telemetry."""
        act = self.actuators.current
        last = self.last
        cap = self.capacity.current
        return GovernorSnapshot(
            policy=self.config.policy,
            threads=self.threads,
            cluster=(act.label if act is not None else "all"),
            power=(act.power if act is not None else "high"),
            pacing_ms=self.actuators.last_pause_s * 1000.0,
            setpoint_c=self.setpoint_c,
            last_decision=last.actuation.describe() if last is not None else "",
            last_reason=last.reason if last is not None else "",
            last_decision_unix=last.at if last is not None else 0.0,
            capabilities=survey(
                self.last_reading,
                self.telemetry.thermal.skin_trips_c(),
                self.actuators.allowed,
                self.platform.caps,
                self.platform.hint,
                self.platform.headroom,
            ),
            mode=self._mode(),
            thermal_headroom=self.headroom_value,
            frontier=self.controller.frontier.describe() if self.controller.frontier is not None else "",
            model_tau_s=self.controller.components.tau_s,
            model_ambient_c=self.controller.components.ambient_c,
            rung=act.rung if act is not None else 0,
            duty=act.duty if act is not None else 1.0,
            capacity_tokens_per_second=cap.tokens_per_second,
            capacity_floor_tokens_per_second=self.capacity.config.floor_tokens_per_second,
            capacity_state=cap.state,
            capacity_basis=cap.basis,
            capacity_retry_after_s=self.retry_after_s(cap),
            refusing_generations=self.refusing,
            thermal_policy=self.config.thermal_policy,
        )
