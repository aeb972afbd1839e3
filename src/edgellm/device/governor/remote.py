"""UpdateConfig: validate a whole request, then apply it (threads = an MNN runtime reload)."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from edgellm.common.errors import InvalidArgument
from edgellm.common.logs import get_logger
from edgellm.device.core import DaemonCore
from edgellm.v1 import device_pb2

log = get_logger(__name__)


def _governor_fields(req: device_pb2.UpdateConfigRequest) -> dict[str, Any]:
    """The governor fields the request sets (unset optional fields are None)."""
    return {
        "policy": req.governor_policy if req.HasField("governor_policy") else None,
        "setpoint_c": req.setpoint_c if req.HasField("setpoint_c") else None,
        "pacing_ms": req.pacing_ms if req.HasField("pacing_ms") else None,
        "power": req.power if req.HasField("power") else None,
        "cluster": req.cluster if req.HasField("cluster") else None,
    }


def _validate(core: DaemonCore, req: device_pb2.UpdateConfigRequest) -> None:
    gov = core.governor
    cpus = max(os.cpu_count() or 1, len(gov.actuators.allowed))
    if req.HasField("threads") and not 1 <= req.threads <= cpus:
        raise InvalidArgument(f"threads must be within 1..{cpus}, not {req.threads}")
    window = req.kv_window if req.HasField("kv_window") else core.config.kv_window
    keep = req.n_keep if req.HasField("n_keep") else core.config.n_keep
    # The same rules as at start-up (minimum window, n_keep below half of it, room for a chunk).
    context = core.engine.context_length if core.engine is not None else 8192
    replace(core.window_policy(), window=window, n_keep=keep).validate(context)
    # governor fields: a dry run on the governor's own validator (it applies nothing on error)
    gov.validate(**_governor_fields(req))


async def apply_update(core: DaemonCore, req: device_pb2.UpdateConfigRequest) -> None:
    """Apply UpdateConfig after validating every field (no partial state on INVALID_ARGUMENT)."""
    _validate(core, req)
    if req.HasField("kv_window") or req.HasField("n_keep"):
        core.config = replace(
            core.config,
            kv_window=req.kv_window if req.HasField("kv_window") else core.config.kv_window,
            n_keep=req.n_keep if req.HasField("n_keep") else core.config.n_keep,
        )
    core.governor.update(**_governor_fields(req))
    if req.HasField("threads") and req.threads != core.threads:
        # Why a reload: MNN reads thread_num only in initRuntime(), which only load() runs.
        core.threads = req.threads
        core.governor.set_threads(req.threads)
        engine = core.engine
        if engine is not None:
            start = time.perf_counter()
            await core.load(engine.artifact.path)
            log.info(
                "threads_reloaded",
                threads=req.threads,
                reload_ms=round((time.perf_counter() - start) * 1000, 1),
            )
