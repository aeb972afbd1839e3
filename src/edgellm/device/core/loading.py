"""Loading an engine: the settings a load uses, the first-forward check, and what a load holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from edgellm.common.errors import FailedPrecondition
from edgellm.common.runtime import Runtime
from edgellm.device.config import DaemonConfig
from edgellm.device.core.state import LoadInfo
from edgellm.engine.artifact import Artifact
from edgellm.engine.base import Engine
from edgellm.engine.config import EngineConfig, attention_mode
from edgellm.engine.kv_cache import KvCache
from edgellm.engine.kv_window import KvMethod, WindowPolicy

EngineFactory = Callable[[Artifact, EngineConfig], Engine]


def check_forward(engine: Engine) -> None:
    """One real token through the model, so a model MNN "loaded" without its graph is refused now
    (S3: `load()` does not report a missing graph; the first forward used to crash the daemon)."""
    logits = engine.prefill([0])
    engine.reset()
    if not np.all(np.isfinite(np.asarray(logits))):
        raise FailedPrecondition("the model loaded but its first forward gave non-finite logits")


def engine_config(config: DaemonConfig, runtime: Runtime) -> EngineConfig:
    """Runtime settings for an artifact: its own, with the daemon's threads and --kv-quant (if set)."""
    kv, engine = config.kv, config.engine
    slides_by_erase = bool(kv.kv_window) and kv.kv_method == KvMethod.ERASE
    mode = attention_mode(runtime, kv.kv_quant, slides_by_erase)
    out = EngineConfig.for_runtime(runtime, threads=engine.threads, attention_mode=mode)
    return replace(out, draft_max=engine.draft_max, scratch_dir=str(config.store.data_dir / "mnn-tmp"))


def window_policy(config: DaemonConfig) -> WindowPolicy:
    """The daemon's sliding-window policy."""
    kv = config.kv
    return WindowPolicy(
        window=kv.kv_window, n_keep=kv.n_keep, chunk=kv.kv_chunk, method=kv.kv_method, tiers=kv.kv_tiers
    )


def warmup_tokens(config: DaemonConfig, policy: WindowPolicy, context_length: int) -> int:
    """Warm-up prefill length: warmup_tokens, within the first KV budget (room for 4 decode steps)."""
    first_budget = policy.budgets[0] if policy.budgets else context_length
    return max(1, min(config.engine.warmup_tokens, first_budget - 8))


@dataclass
class LoadUnderway:
    """A load in progress: what it loads (a path's name until the manifest is read) and since when."""

    name: str
    started: float  # time.monotonic()
    done: asyncio.Event

    @property
    def seconds(self) -> float:
        """How long it has been loading."""
        return time.monotonic() - self.started


@dataclass(frozen=True)
class Loaded:
    """The model in the engine: what was loaded, the engine, and the driver of its KV cache."""

    info: LoadInfo
    engine: Engine
    cache: KvCache

    @property
    def artifact(self) -> Artifact:
        """The loaded artifact."""
        return self.info.artifact
