"""Android's own thermal forecast: AThermal_getThermalHeadroom (API 31) and the thermal status (API 30).

Headroom is 0 for a cool phone and 1.0 at the SEVERE throttling threshold, forecast `forecast_s`
ahead from the skin sensors; NaN when unsupported or when called much faster than once a second
(the governor calls it at 1 Hz). The governor treats it as a forecast input: above a limit the aim
comes down (controller.py).
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

from edgellm.common.logs import get_logger
from edgellm.device.governor import ndk

log = get_logger(__name__)


class ThermalHeadroom:
    """Adapter over AThermal_*; `available` is False (with `reason`) where libandroid.so lacks them."""

    name = "athermal_headroom"

    def __init__(self, lib: Any | None = None, forecast_s: int = 30) -> None:
        self.forecast_s = forecast_s
        self.reason = ""
        self._manager: Any = None
        self._headroom: Any = None
        self._status: Any = None
        if lib is None:
            lib, self.reason = ndk.load()
        if lib is None:
            return
        acquire = ndk.bind(lib, "AThermal_acquireManager", ctypes.c_void_p, [])
        self._headroom = ndk.bind(
            lib, "AThermal_getThermalHeadroom", ctypes.c_float, [ctypes.c_void_p, ctypes.c_int]
        )
        self._status = ndk.bind(lib, "AThermal_getCurrentThermalStatus", ctypes.c_int, [ctypes.c_void_p])
        if acquire is None or self._headroom is None:
            self.reason = "AThermal_getThermalHeadroom needs Android 11 / API 31"
            self._headroom = None
            return
        self._manager = acquire()
        if not self._manager:
            self.reason = "AThermal_acquireManager returned NULL"
            self._headroom = None

    @property
    def available(self) -> bool:
        """Whether headroom can be read on this device."""
        return self._headroom is not None

    def read(self) -> float | None:
        """Headroom forecast_s ahead (1.0 = SEVERE), or None when unsupported or NaN."""
        if self._headroom is None:
            return None
        value = float(self._headroom(self._manager, self.forecast_s))
        return None if math.isnan(value) else value

    def status(self) -> int | None:
        """AThermalStatus 0-6 (NONE ... SHUTDOWN), or None."""
        if self._status is None or not self._manager:
            return None
        value = int(self._status(self._manager))
        return None if value < 0 else value
