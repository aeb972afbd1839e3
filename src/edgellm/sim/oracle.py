"""The yardstick: the best throughput a fixed operating point sustains under the governor's constraints.

Constraints: the skin never above the comfort limit the governor uses, and no firmware mitigation
(the comfort limit sits below the first trip, so the first implies the second). The search knows
the plant exactly (it is a yardstick, not a policy): for a fixed actuation the skin rises
monotonically to ambient + R_skin→air × mean power, so an actuation is feasible when its mean
power over a request cycle is at most (limit − ambient) / R. Candidates are every rung with a duty
cycle and every pair of rungs blended by a share of tokens (the governor's own actuator space);
each family is bisected on its parameter, the fastest feasible point wins, and it is run through
the simulator for the reported figure.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from edgellm.device.governor.actuation import Actuation
from edgellm.device.governor.controller import GovernorConfig
from edgellm.sim.plant import ThermalPlant
from edgellm.sim.profile import PhoneProfile
from edgellm.sim.simulate import SimResult, comfort_limit, phone_ladder, simulate


@dataclass(frozen=True)
class OracleResult:
    """The best fixed operating point and its simulated run."""

    actuation: Actuation
    comfort_c: float
    sustainable_power_w: float  # mean power that holds the skin exactly at the limit
    steady_tokens_per_second: float  # its throughput once warm
    run: SimResult

    @property
    def mean_tokens_per_second(self) -> float:
        """Mean over the simulated minutes (the acceptance ratio's denominator)."""
        return self.run.mean_tokens_per_second


def cycle(plant: ThermalPlant, act: Actuation) -> tuple[float, float]:
    """(tokens/s, mean power W) of back-to-back requests at act, unthrottled, static power included."""
    p = plant.p
    sp = plant.speeds(act)
    step, energy = plant.decode_cost(act)
    prefill_s = p.workload.prompt_tokens / sp.prefill_tokens_per_second
    decode_s = p.workload.new_tokens * (step + act.pause_s(step))
    joules = prefill_s * sp.prefill_busy_power_w + p.workload.new_tokens * energy
    span = prefill_s + decode_s
    return p.workload.new_tokens / span, p.static_power_w + joules / span


def _best_in_family(
    family: Callable[[float], Actuation], plant: ThermalPlant, budget_w: float
) -> tuple[float, Actuation] | None:
    """Fastest feasible point of a one-parameter family whose power rises with the parameter in [0, 1]."""
    _, lo_w = cycle(plant, family(0.0))
    if lo_w > budget_w:
        return None
    hi_tps, hi_w = cycle(plant, family(1.0))
    if hi_w <= budget_w:
        return hi_tps, family(1.0)
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if cycle(plant, family(mid))[1] <= budget_w:
            lo = mid
        else:
            hi = mid
    return cycle(plant, family(lo))[0], family(lo)


def families(ladder: list[Actuation], min_duty: float) -> list[Callable[[float], Actuation]]:
    """Each rung with a duty cycle (min_duty..1), and each ordered pair of rungs mixed by a token share."""

    def paced(rung: Actuation) -> Callable[[float], Actuation]:
        return lambda s: replace(rung, duty=min_duty + (1.0 - min_duty) * s)

    def blended(hot: Actuation, cool: Actuation) -> Callable[[float], Actuation]:
        mixed = replace(cool, blend_cpus=hot.cpus, blend_freq_cap=hot.freq_cap)
        return lambda s: replace(mixed, blend=s) if s > 0 else cool

    return [paced(r) for r in ladder] + [blended(a, b) for a, b in itertools.permutations(ladder, 2)]


def oracle(profile: PhoneProfile, minutes: float, config: GovernorConfig | None = None) -> OracleResult:
    """The best fixed actuation under the governor's comfort limit, and its simulated run."""
    cfg = config or GovernorConfig()
    limit = comfort_limit(profile, cfg)
    plant = ThermalPlant(profile)
    # a charger's heat reaches the skin whatever runs: it comes off the budget
    budget = (
        limit - profile.ambient_c
    ) / profile.skin_to_ambient_resistance_k_per_w - profile.charging_heat_w
    ladder = phone_ladder(profile)
    best: tuple[float, Actuation] | None = None
    for family in families(ladder, cfg.min_duty):
        found = _best_in_family(family, plant, budget)
        if found is not None and (best is None or found[0] > best[0]):
            best = found
    if best is None:  # not even the coolest rung at the deepest duty fits: report that, idle
        coolest = replace(ladder[-1], duty=cfg.min_duty)
        best = (0.0, coolest)
    tps, act = best
    return OracleResult(
        act, limit, budget, tps, simulate(profile, minutes, governor=False, config=cfg, pinned=act)
    )
