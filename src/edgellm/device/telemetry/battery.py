"""Battery temperature through Termux:API (`termux-battery-status`): async, with timeout and cache.

/sys/class/power_supply is not readable to an unrooted app, so this is the phone's only battery
thermometer; the command takes 1-7 s and sometimes hangs, hence the timeout and the cached value.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import Callable

from edgellm.common.logs import get_logger

log = get_logger(__name__)


class BatteryReader:
    """Caches the last temperature; `refresh()` runs the command at most once per max_age_s."""

    def __init__(
        self,
        command: tuple[str, ...] = ("termux-battery-status",),
        timeout_s: float = 8.0,
        max_age_s: float = 60.0,
        time_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self.time_fn = time_fn
        self.celsius: float | None = None
        self.updated = -float("inf")
        self.available = shutil.which(command[0]) is not None
        self._task: asyncio.Task[None] | None = None
        log.info("battery_probe", command=command[0], available=self.available)

    def cached(self) -> float | None:
        """The last temperature read, or None."""
        return self.celsius

    def maybe_refresh(self) -> None:
        """Start a background refresh when the cache is stale (call from the event loop)."""
        if not self.available or (self._task is not None and not self._task.done()):
            return
        if self.time_fn() - self.updated < self.max_age_s:
            return
        self._task = asyncio.get_running_loop().create_task(self.refresh())

    async def refresh(self) -> None:
        """Run the command once (bounded by timeout_s) and update the cache; failures keep the old value."""
        self.updated = self.time_fn()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
            )
        except OSError as err:
            self.available = False
            log.warning("battery_unavailable", error=str(err))
            return
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            log.warning("battery_timeout", timeout_s=self.timeout_s)
            return
        try:
            self.celsius = float(json.loads(out)["temperature"])
        except (ValueError, KeyError, TypeError) as err:
            log.warning("battery_bad_output", error=str(err))

    async def close(self) -> None:
        """Cancel a refresh in flight."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
