"""What the governor can change on an unrooted phone, as data."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar

from edgellm.common.errors import InvalidArgument

POWER_MODES = ("high", "normal", "low")
_E = TypeVar("_E", bound=StrEnum)


def _choice(enum: type[_E], key: str, text: str) -> _E:
    """The member of `enum` named `text`, or InvalidArgument naming `key` and its choices."""
    try:
        return enum(text)
    except ValueError:
        choices = ", ".join(p.value for p in enum)
        raise InvalidArgument(f"{key} must be one of {choices}, not {text!r}") from None


class GovernorPolicy(StrEnum):
    """Who picks the actuation: the thermal controller, nobody (fastest rung), or the user (pinned)."""

    THERMAL = "thermal"
    OFF = "off"
    PINNED = "pinned"

    @classmethod
    def parse(cls, text: str) -> GovernorPolicy:
        """The policy named `text`, or InvalidArgument listing the choices."""
        return _choice(cls, "governor_policy", text)


class ThermalPolicy(StrEnum):
    """What the thermal controller holds: the skin under the comfort limit, or the most tokens."""

    COMFORT = "comfort"  # never above the comfort limit: no firmware throttling
    THROUGHPUT = "throughput"  # never fewer tokens than unmanaged: firmware throttling allowed

    @classmethod
    def parse(cls, text: str) -> ThermalPolicy:
        """The policy named `text`, or InvalidArgument listing the choices."""
        return _choice(cls, "thermal_policy", text)


@dataclass(frozen=True)
class Actuation:
    """One operating point: decode affinity, MNN power mode and pacing between decode steps.

    `threads` is the engine's thread count (a change means an MNN runtime reload); `cpus` is the
    decode affinity; `prefill_cpus` is the affinity for the short prefill burst (TTFT).
    """

    threads: int
    cpus: tuple[int, ...]
    prefill_cpus: tuple[int, ...]
    power: str = "high"
    pacing_ms: float = 0.0  # fixed sleep between decode steps (pinned by UpdateConfig)
    duty: float = 1.0  # decode duty cycle: sleep step_time * (1/duty - 1) after each step
    rung: int = 0
    label: str = ""
    blend_cpus: tuple[int, ...] = ()  # the next rung's decode cores
    blend: float = 0.0  # share of decode tokens run on blend_cpus (interleaved in short blocks)
    freq_cap: float = 1.0  # scaling_max_freq of the decode cores' domains, as a fraction (rooted only)
    blend_freq_cap: float = 1.0  # the same for the blended rung

    def pause_s(self, step_s: float) -> float:
        """Seconds to sleep after a decode step that took step_s."""
        return step_s * (1.0 / max(self.duty, 1e-3) - 1.0) + self.pacing_ms / 1000.0

    def describe(self) -> str:
        """Short human form, e.g. 'middle [3, 4, 5, 6] t4 normal duty 0.80'."""
        duty = f" duty {self.duty:.2f}" if self.duty < 1.0 else ""
        pace = f" pace {self.pacing_ms:.1f} ms" if self.pacing_ms > 0 else ""
        mix = f" + {self.blend:.0%} on {list(self.blend_cpus)}" if self.blend > 0 and self.blend_cpus else ""
        cap = f" @{self.freq_cap:.0%} fmax" if self.freq_cap < 1.0 else ""
        return f"{self.label or 'cpus'} {list(self.cpus)} t{self.threads} {self.power}{cap}{duty}{pace}{mix}"

    def blended(self) -> Actuation:
        """The other operating point of a blend: the same actuation on blend_cpus."""
        return replace(self, cpus=self.blend_cpus, freq_cap=self.blend_freq_cap, blend_cpus=(), blend=0.0)
