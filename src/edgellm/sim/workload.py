"""Continuous chat traffic on the virtual phone: prefill a prompt, decode new_tokens, repeat."""

from __future__ import annotations

from edgellm.device.governor.actuation import Actuation
from edgellm.sim.plant import ThermalPlant


class Workload:
    """Back-to-back requests of a fixed shape; tracks TTFT of each request."""

    def __init__(self, prompt_tokens: int, new_tokens: int) -> None:
        self.prompt_tokens, self.new_tokens = prompt_tokens, new_tokens
        self.prefill_left = float(prompt_tokens)
        self.decode_left = 0.0
        self.ttft_acc = 0.0
        self.ttfts: list[float] = []
        self.ttft_times: list[float] = []  # simulated time each first token came out
        self.now = 0.0
        self.last_prefill_s: float | None = None  # simulated time the last prefill burst ran

    def advance(self, plant: ThermalPlant, act: Actuation, dt: float) -> tuple[float, float]:
        """Run dt seconds; return (tokens decoded, energy in joules above static). Nothing once shut down."""
        if plant.shut_down:
            return 0.0, 0.0
        sp = plant.speeds(act)
        step, step_energy = plant.decode_cost(act)
        left, tokens, energy = dt, 0.0, 0.0
        while left > 1e-12:
            if self.prefill_left > 0:
                self.last_prefill_s = self.now + (dt - left)
                need = self.prefill_left / sp.prefill_tokens_per_second
                s = min(need, left)
                self.prefill_left -= s * sp.prefill_tokens_per_second
                self.ttft_acc += s
                energy += s * sp.prefill_busy_power_w
                left -= s
                if self.prefill_left <= 1e-9:
                    self.prefill_left = 0.0
                    self.ttfts.append(self.ttft_acc)
                    self.ttft_times.append(self.now + (dt - left))
                    self.decode_left = float(self.new_tokens)
                continue
            period = step + act.pause_s(step)
            s = min(self.decode_left * period, left)
            n = s / period
            tokens += n
            energy += n * step_energy
            self.decode_left -= n
            left -= s
            if self.decode_left <= 1e-9:
                self.prefill_left, self.ttft_acc = float(self.prompt_tokens), 0.0
        return tokens, energy
