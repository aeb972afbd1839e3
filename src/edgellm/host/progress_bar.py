"""A terminal progress bar for job-style progress callbacks ``(fraction, "stage: message")``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from edgellm.common.progress import Progress


@contextmanager
def progress_bar(desc: str, enabled: bool = True) -> Iterator[Progress]:
    """Yield a progress callback that drives a tqdm bar (0..100%) with the stage as its postfix."""
    if not enabled:
        yield lambda _f, _m: None
        return
    from tqdm import tqdm

    bar: Any = tqdm(
        total=1000, desc=desc, unit="‰", bar_format="{l_bar}{bar}| {elapsed}<{remaining} {postfix}"
    )
    try:

        def update(fraction: float, message: str) -> None:
            bar.n = int(min(max(fraction, 0.0), 1.0) * 1000)
            bar.set_postfix_str(message[:60], refresh=False)
            bar.refresh()

        yield update
    finally:
        bar.close()
