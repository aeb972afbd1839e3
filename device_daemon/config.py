"""Daemon configuration: one frozen dataclass, passed in explicitly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.targets import DEFAULT_DAEMON_PORT


@dataclass(frozen=True)
class DaemonConfig:
    """Everything `edgellm daemon` can be told at start."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_DAEMON_PORT
    model: Path | None = None  # artifact directory loaded at start
    data_dir: Path = Path.home() / ".edgellm"
    threads: int = 2
    queue_size: int = 8
    max_new_tokens_cap: int = 2048
    kv_window: int = 0  # 0 = the whole context
    n_keep: int = 4
    warmup: bool = True
    grace_seconds: float = 2.0
