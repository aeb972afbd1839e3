"""Android Dynamic Performance Framework hints: APerformanceHint_* (API 33) for paced decode.

A hint session tells the scheduler how long each cycle of work may take (target) and how long it
did take (actual). When the governor paces decode (a duty cycle below 1), the target is the paced
period, so the step may run slower: the kernel can lower clocks instead of racing and sleeping,
which costs less energy for the same tokens (dynamic power ∝ f^2.2, decode speed less than ∝ f).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from edgellm.common.logs import get_logger
from edgellm.device.governor import ndk

log = get_logger(__name__)


class PerformanceHint:
    """Adapter over APerformanceHint_*; `available` is False (with `reason`) where unsupported."""

    name = "adpf_performance_hint"

    def __init__(self, lib: Any | None = None) -> None:
        self.reason = ""
        self._session: Any = None
        self._manager: Any = None
        self._fns: dict[str, Any] = {}
        self.target_ns = 0
        if lib is None:
            lib, self.reason = ndk.load()
        if lib is None:
            return
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        sig: dict[str, tuple[Any, list[Any]]] = {
            "APerformanceHint_getManager": (p, []),
            "APerformanceHint_createSession": (p, [p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, i64]),
            "APerformanceHint_updateTargetWorkDuration": (ctypes.c_int, [p, i64]),
            "APerformanceHint_reportActualWorkDuration": (ctypes.c_int, [p, i64]),
            "APerformanceHint_closeSession": (None, [p]),
        }
        for name, (res, args) in sig.items():
            fn = ndk.bind(lib, name, res, args)
            if fn is None:
                self.reason = f"{name} needs Android 13 / API 33"
                return
            self._fns[name] = fn
        self._manager = self._fns["APerformanceHint_getManager"]()
        if not self._manager:
            self.reason = "APerformanceHint_getManager returned NULL"

    @property
    def available(self) -> bool:
        """Whether hint sessions can be made here."""
        return bool(self._fns) and bool(self._manager)

    @property
    def live(self) -> bool:
        """Whether a session is open."""
        return bool(self._session)

    def open(self, thread_ids: Sequence[int], target_s: float) -> bool:
        """Open a session over the given threads (this process's); False (with reason) if refused."""
        if not self.available or self._session:
            return self.live
        tids = (ctypes.c_int32 * len(thread_ids))(*thread_ids)
        self.target_ns = max(int(target_s * 1e9), 1)
        self._session = self._fns["APerformanceHint_createSession"](
            self._manager, tids, len(thread_ids), self.target_ns
        )
        if not self._session:
            self.reason = "APerformanceHint_createSession returned NULL (hint sessions unsupported here)"
        return self.live

    def target(self, seconds: float) -> None:
        """Set the work duration each decode step may take (the paced period)."""
        ns = max(int(seconds * 1e9), 1)
        if self._session and abs(ns - self.target_ns) > self.target_ns // 20:  # ≥ 5% change: one call
            self.target_ns = ns
            self._fns["APerformanceHint_updateTargetWorkDuration"](self._session, ns)

    def report(self, seconds: float) -> None:
        """Report how long the last decode step took."""
        if self._session:
            self._fns["APerformanceHint_reportActualWorkDuration"](self._session, max(int(seconds * 1e9), 1))

    def close(self) -> None:
        """Close the session."""
        if self._session:
            self._fns["APerformanceHint_closeSession"](self._session)
            self._session = None
