"""The daemon's governor loop: telemetry reader -> controller -> actuators, plus remote control.

Only wiring lives here (STYLE 12): the controller is pure, the actuators are plain calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from edgellm.common.errors import InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.device.governor.actuation import POWER_MODES, Actuation, GovernorPolicy
from edgellm.device.governor.actuators import Actuators
from edgellm.device.governor.adpf import PerformanceHint
from edgellm.device.governor.capabilities import Capability, survey
from edgellm.device.governor.controller import Decision, GovernorConfig, ThermalController
from edgellm.device.governor.cpufreq_caps import CpufreqCaps, with_frequency_caps
from edgellm.device.governor.headroom import ThermalHeadroom
from edgellm.device.governor.ladder import build_ladder
from edgellm.device.telemetry.battery import BatteryReader
from edgellm.device.telemetry.source import Reading, TelemetrySource
from edgellm.device.virtual_phone.profile import load_profile
from edgellm.device.virtual_phone.runtime import VirtualPhoneRuntime

log = get_logger(__name__)


@dataclass(frozen=True)
class GovernorUpdate:
    """A remote-control change (UpdateConfig); None leaves a field as it is."""

    policy: GovernorPolicy | None = None
    setpoint_c: float | None = None
    pacing_ms: float | None = None
    power: str | None = None
    cluster: str | None = None

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


class GovernorRuntime:
    """Owns the telemetry source, the controller, the actuators and (optionally) the virtual phone."""

    def __init__(
        self,
        threads: int,
        config: GovernorConfig,
        sysfs_root: Path = Path("/"),
        proc_root: Path = Path("/"),
        virtual_phone: str | None = None,
        virtual_root: Path | None = None,
        time_scale: float = 1.0,
        battery: BatteryReader | None = None,
        period_s: float = 1.0,
    ) -> None:
        self.phone: VirtualPhoneRuntime | None = None
        actuators_allowed: Iterable[int] | None = None
        if virtual_phone:
            root = virtual_root or sysfs_root
            self.phone = VirtualPhoneRuntime(load_profile(virtual_phone), root, time_scale)
            sysfs_root = root
            actuators_allowed = self.phone.profile.cpus
        self.telemetry = TelemetrySource(sysfs_root, proc_root, battery)
        # What this phone allows beyond affinity and pacing (each reports itself unavailable elsewhere).
        self.caps = CpufreqCaps(sysfs_root)
        self.hint = PerformanceHint()
        self.headroom = ThermalHeadroom()
        self.headroom_value: float | None = None
        if self.phone is not None:
            # Virtual cores do not exist on this machine: affinity is recorded, not applied.
            self.actuators = Actuators(allowed=actuators_allowed, affinity=lambda cpus: tuple(sorted(cpus)))
            phone = self.phone
            self.actuators.extra_delay = lambda step: step * (phone.slowdown(self.actuators.current) - 1.0)
        else:
            self.actuators = Actuators(hint=self.hint, caps=self.caps)
        self.config = config
        # On the virtual phone the ladder is over its simulated cores with its own MNN thread count.
        self.threads = self.phone.profile.unmanaged_threads if self.phone is not None else threads
        self.period_s = period_s
        self._busy = False
        self.last: Decision | None = None
        self.last_reading: Reading | None = None
        self._pinned: Actuation | None = None
        self.throttled_seconds = 0.0  # time spent below the fastest rung (summed each period)
        self._seen_temperature = False  # see `blind`
        self._build()
        self._task: asyncio.Task[None] | None = None
        log.info(
            "governor_ready",
            policy=config.policy,
            setpoint_c=self.setpoint_c,
            rungs=[r.describe() for r in self.ladder],
            virtual_phone=virtual_phone,
        )

    def _build(self) -> None:
        allowed = set(self.actuators.allowed)
        clusters = self.telemetry.cpu.clusters
        if clusters and allowed & {c for cl in clusters for c in cl.cpus}:
            self.ladder = build_ladder(clusters, allowed, self.threads)
            if self.caps.available:  # rooted: each rung also at a capped frequency
                self.ladder = with_frequency_caps(self.ladder)
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

    @busy.setter
    def busy(self, busy: bool) -> None:
        self._busy = busy
        if not busy:
            self.actuators.release()  # idle: the process gets all its cores back until the next request

    # -- loop --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the periodic loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the loop and give back what it changed: affinity, the ADPF session, frequency caps."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.actuators.restore()
        if self.telemetry.battery is not None:
            await self.telemetry.battery.close()
        self.hint.close()
        if self.caps.available:
            self.caps.restore()

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.period_s)
            now = time.monotonic()
            if self.telemetry.battery is not None:
                self.telemetry.battery.maybe_refresh()
            self.tick(now, now - last)
            last = now

    def tick(self, now: float, elapsed_s: float) -> Decision | None:
        """One control period: advance the virtual phone, read, decide, actuate."""
        if self.phone is not None:
            self.phone.advance(elapsed_s, self.busy, self.actuators.current)
            now = self.phone.sim_seconds  # the controller runs on the phone's (scaled) clock
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
        self.headroom_value = self.headroom.read()
        age = self.actuators.prefill_age_s()
        scale = self.phone.time_scale if self.phone is not None else 1.0
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
        return decision

    # -- remote control ----------------------------------------------------------------------------
    def validate(self, change: GovernorUpdate) -> None:
        """Raise InvalidArgument for any bad field; changes nothing."""
        if change.setpoint_c is not None and not 20.0 <= change.setpoint_c <= 90.0:
            raise InvalidArgument(f"setpoint_c must be within 20..90 °C, not {change.setpoint_c}")
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
        if change.policy is not None:
            self.config = replace(self.config, policy=change.policy)
        elif change.pins:
            self.config = replace(self.config, policy=GovernorPolicy.PINNED)
        if change.pins:
            self._pinned = self._pin(change)
        if change.setpoint_c is not None or change.policy is not None:
            self._build()
        else:
            self._apply_policy()
        log.info("governor_update", policy=self.config.policy, setpoint_c=self.setpoint_c, pinned=change.pins)

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
                self.caps,
                self.hint,
                self.headroom,
            ),
            mode=self._mode(),
            thermal_headroom=self.headroom_value,
            frontier=self.controller.frontier.describe() if self.controller.frontier is not None else "",
            model_tau_s=self.controller.components.tau_s,
            model_ambient_c=self.controller.components.ambient_c,
            rung=act.rung if act is not None else 0,
        )
