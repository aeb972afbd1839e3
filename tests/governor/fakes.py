"""Named fakes for what this host lacks: libandroid.so's NDK functions and a phone's cpufreq tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class FakeLibAndroid:
    """The NDK functions the adapters bind, recording calls (an attribute per C symbol)."""

    def __init__(self, api: int = 34, headroom: float = 0.42, session: int = 0xBEEF) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.headroom = headroom

        def fn(name: str, result: Any) -> Any:
            def call(*args: Any) -> Any:
                self.calls.append((name, args))
                return result() if callable(result) else result

            return call

        if api >= 30:
            self.AThermal_acquireManager = fn("AThermal_acquireManager", 0x1234)
            self.AThermal_getCurrentThermalStatus = fn("AThermal_getCurrentThermalStatus", 2)
        if api >= 31:
            self.AThermal_getThermalHeadroom = fn("AThermal_getThermalHeadroom", lambda: self.headroom)
        if api >= 33:
            self.APerformanceHint_getManager = fn("APerformanceHint_getManager", 0x5678)
            self.APerformanceHint_createSession = fn("APerformanceHint_createSession", session)
            self.APerformanceHint_updateTargetWorkDuration = fn(
                "APerformanceHint_updateTargetWorkDuration", 0
            )
            self.APerformanceHint_reportActualWorkDuration = fn(
                "APerformanceHint_reportActualWorkDuration", 0
            )
            self.APerformanceHint_closeSession = fn("APerformanceHint_closeSession", None)


def fake_cpufreq(root: Path) -> None:
    """Two frequency domains under root: cpus 0-1 at 2.0 GHz, cpus 2-3 at 3.0 GHz, uncapped."""
    for cpu, (related, khz) in enumerate([("0 1", 2000000)] * 2 + [("2 3", 3000000)] * 2):
        d = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        d.mkdir(parents=True)
        (d / "related_cpus").write_text(related + "\n")
        (d / "cpuinfo_max_freq").write_text(f"{khz}\n")
        (d / "scaling_max_freq").write_text(f"{khz}\n")
