"""Progress callbacks of long jobs: ``progress(fraction, "stage: message")``."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[float, str], None]


def quiet(_fraction: float, _message: str) -> None:
    """A progress callback that reports nothing."""
    return None


def scaled(progress: Progress, start: float, span: float, prefix: str = "") -> Progress:
    """A callback mapping a sub-step's 0..1 onto ``start .. start + span`` of ``progress``."""
    return lambda f, m: progress(start + span * f, f"{prefix}{m}")
