"""Durable fresh files: created exclusively (never through a planted link), written, fsync'd."""

from __future__ import annotations

import os
from pathlib import Path


def write_fresh(path: Path, data: bytes, mode: int) -> None:
    """Create PATH with MODE (O_EXCL, O_NOFOLLOW), write DATA and fsync it; remove it on failure."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
