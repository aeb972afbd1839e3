"""Low-headroom phones: a generated phone put in a hot room, a case or a pocket, or on a charger.

The base generator (sim/generator.py) redraws any phone whose idle skin sits within 1 °C of the
comfort limit. Those are the phones users complain about, so these sets keep them: the same phone
draw, then a situation —

- a room at 27-38 °C (a summer room without air conditioning, a car);
- a case (skin→air resistance ×1.2-1.4) or a pocket (×1.4-1.6), or neither;
- a charger on a third of the phones: 0.3-1.0 W of charging losses heating the skin directly.

Two strata, alternating through a set: *thin* (idle skin within 2 °C of the first trip: half of
each set) and *warm* (more than 2 °C under it, in the same rooms, cases and chargers). A phone whose idle skin
is within 0.5 °C of its first trip is redrawn: its firmware throttles it with the screen on
whatever the app does (the daemon's capacity estimate covers that live, not this yardstick).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from edgellm.sim.generator import (
    HELD_OUT_DRAWS,
    LOW_HEADROOM_HELD_OUT,
    LOW_HEADROOM_HELD_OUT_2_SEEDS,
    LOW_HEADROOM_HELD_OUT_3_SEEDS,
    LOW_HEADROOM_HELD_OUT_4_SEEDS,
    LOW_HEADROOM_HELD_OUT_5_SEEDS,
    LOW_HEADROOM_HELD_OUT_6_SEEDS,
    LOW_HEADROOM_HELD_OUT_SEEDS,
    LOW_HEADROOM_TUNING_SEEDS,
    Purpose,
    draw_phone,
    refuse_held_out,
)
from edgellm.sim.profile import PhoneProfile, profile_from_dict

THIN_BAND_C = 2.0  # the thin stratum: idle skin within this of the first trip
IDLE_TRIP_MARGIN_C = 0.5  # idle skin closer than this to the first trip: the firmware throttles it idle

Enclosure = Literal["bare", "case", "pocket"]


@dataclass(frozen=True)
class Situation:
    """Where the phone is: the room, what it is wrapped in, whether it charges."""

    ambient_c: float
    enclosure: Enclosure
    cooling_factor: float  # skin→air thermal resistance ×this (1: bare)
    charging_heat_w: float  # battery heat into the skin (0: not charging)

    def describe(self) -> str:
        """Short human form, e.g. '33.1 °C room, pocket ×1.52, charging 0.6 W'."""
        wrap = "" if self.enclosure == "bare" else f", {self.enclosure} ×{self.cooling_factor:.2f}"
        charge = f", charging {self.charging_heat_w:.1f} W" if self.charging_heat_w > 0 else ""
        return f"{self.ambient_c:.1f} °C room{wrap}{charge}"


def draw_situation(rng: random.Random) -> Situation:
    """A hot room, maybe a case or a pocket, maybe a charger."""
    ambient = round(rng.uniform(27.0, 38.0), 2)
    enclosure: Enclosure = rng.choice(("bare", "case", "pocket"))
    factor = {"bare": 1.0, "case": rng.uniform(1.2, 1.4), "pocket": rng.uniform(1.4, 1.6)}[enclosure]
    charging = rng.uniform(0.3, 1.0) if rng.random() < 1 / 3 else 0.0
    return Situation(ambient, enclosure, round(factor, 3), round(charging, 3))


def place(phone: dict[str, Any], where: Situation) -> dict[str, Any]:
    """The phone's JSON object in a situation (the firmware stays as the vendor tuned it, bare at 25 °C)."""
    skin = {
        **phone["skin"],
        "thermal_resistance_to_ambient_k_per_w": round(
            phone["skin"]["thermal_resistance_to_ambient_k_per_w"] * where.cooling_factor, 3
        ),
    }
    return {
        **phone,
        "description": f"{phone['description']}; {where.describe()}",
        "ambient_c": where.ambient_c,
        "skin": skin,
        "charging_heat_to_skin_w": where.charging_heat_w,
        "starts_idle_warm": True,
    }


def idle_margin_c(profile: PhoneProfile) -> float:
    """First skin trip minus the idle skin: how much heat the phone has for decoding at all."""
    return profile.firmware.levels[0].trip_skin_c - profile.idle_skin_c


def _fits(profile: PhoneProfile, thin: bool) -> bool:
    margin = idle_margin_c(profile)
    return IDLE_TRIP_MARGIN_C <= margin <= THIN_BAND_C if thin else margin > THIN_BAND_C


def low_headroom_profile(seed: int, thin: bool, purpose: Purpose = "evaluation") -> PhoneProfile:
    """The low-headroom phone of a seed (deterministic); thin: idle skin within 2 °C of the first trip."""
    refuse_held_out(seed, purpose)
    rng = random.Random(seed)
    prefix = "lowheadroom-held-out" if seed in LOW_HEADROOM_HELD_OUT else "lowheadroom"
    for _ in range(100):
        phone = draw_phone(rng, f"{prefix}-{seed}")
        for _ in range(50):
            prof = profile_from_dict(place(phone, draw_situation(rng)))
            if _fits(prof, thin):
                return prof
    raise RuntimeError(f"seed {seed}: no low-headroom phone in 5,000 draws")


def low_headroom_by_seed(seed: int) -> PhoneProfile:
    """The phone a low-headroom set holds at this seed (its stratum follows its place in the set)."""
    held_out = tuple(low for _, low in HELD_OUT_DRAWS)
    for seeds in (LOW_HEADROOM_TUNING_SEEDS, *held_out):
        if seed in seeds:
            return low_headroom_profile(seed, thin=seeds.index(seed) % 2 == 0)
    spans = ", ".join(f"{seeds[0]}-{seeds[-1]}" for seeds in held_out)
    raise ValueError(
        f"seed {seed} is in no low-headroom set "
        f"(tuning {LOW_HEADROOM_TUNING_SEEDS[0]}-{LOW_HEADROOM_TUNING_SEEDS[-1]}, held out {spans})"
    )


def _stratified(seeds: tuple[int, ...], purpose: Purpose) -> list[PhoneProfile]:
    return [low_headroom_profile(s, thin=k % 2 == 0, purpose=purpose) for k, s in enumerate(seeds)]


def low_headroom_tuning_profiles(seeds: tuple[int, ...] = LOW_HEADROOM_TUNING_SEEDS) -> list[PhoneProfile]:
    """The low-headroom tuning set (refuses any held-out seed)."""
    return _stratified(seeds, "tuning")


def low_headroom_held_out_profiles(
    seeds: tuple[int, ...] = LOW_HEADROOM_HELD_OUT_SEEDS,
) -> list[PhoneProfile]:
    """The low-headroom held-out set: for the acceptance table only."""
    return _stratified(seeds, "evaluation")


def low_headroom_held_out_2_profiles() -> list[PhoneProfile]:
    """The fresh low-headroom held-out draw (seeds 9601-9624, thin and warm alternating): acceptance only."""
    return low_headroom_held_out_profiles(LOW_HEADROOM_HELD_OUT_2_SEEDS)


def low_headroom_held_out_3_profiles() -> list[PhoneProfile]:
    """The third low-headroom held-out draw (seeds 9801-9824, thin and warm alternating): acceptance only."""
    return low_headroom_held_out_profiles(LOW_HEADROOM_HELD_OUT_3_SEEDS)


def low_headroom_held_out_4_profiles() -> list[PhoneProfile]:
    """The fourth low-headroom held-out draw (seeds 9951-9974, thin and warm alternating): acceptance only."""
    return low_headroom_held_out_profiles(LOW_HEADROOM_HELD_OUT_4_SEEDS)


def low_headroom_held_out_5_profiles() -> list[PhoneProfile]:
    """The fifth low-headroom held-out draw (seeds 70151-70174, thin and warm alternating): acceptance."""
    return low_headroom_held_out_profiles(LOW_HEADROOM_HELD_OUT_5_SEEDS)


def low_headroom_held_out_6_profiles() -> list[PhoneProfile]:
    """The sixth low-headroom held-out draw (seeds 90151-90174, thin and warm alternating): acceptance."""
    return low_headroom_held_out_profiles(LOW_HEADROOM_HELD_OUT_6_SEEDS)
