"""Operating points an unrooted phone allows, from its CPU topology, fastest first."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from edgellm.device.governor.actuation import Actuation
from edgellm.device.telemetry.cpu import CoreCluster


def _rank(clusters: Sequence[CoreCluster], allowed: Collection[int]) -> list[tuple[int, ...]]:
    ordered = sorted(clusters, key=lambda c: (c.capacity, c.max_khz), reverse=True)
    ranked = [tuple(sorted((c for c in cl.cpus if c in allowed), reverse=True)) for cl in ordered]
    return [r for r in ranked if r]


def build_ladder(clusters: Sequence[CoreCluster], allowed: Collection[int], threads: int) -> list[Actuation]:
    """Rungs from fastest to coolest: all fast cores → middle cores → half the middle → little cores.

    The thread count stays fixed (a change costs an MNN reload); rungs move the decode affinity and
    MNN's power hint. Prefill always gets the fastest set: it is a short burst and sets TTFT.
    """
    ranked = _rank(clusters, allowed)
    if not ranked:
        raise ValueError("no allowed CPU in any cluster")
    flat = [c for group in ranked for c in group]
    fastest = tuple(flat[:threads])
    middle = ranked[1] if len(ranked) > 1 else ranked[0]
    candidates: list[tuple[str, tuple[int, ...], str]] = [("fastest", fastest, "high")]
    if len(ranked) > 1:
        candidates.append(("middle", middle[:threads], "normal"))
    candidates.append(("middle-half", middle[: max(1, math.ceil(min(threads, len(middle)) / 2))], "normal"))
    if len(ranked) > 2 or len(ranked) == 1:
        candidates.append(("little", ranked[-1][: max(1, min(threads, len(ranked[-1])))], "low"))
    rungs: list[Actuation] = []
    seen: set[tuple[int, ...]] = set()
    for label, cpus, power in candidates:
        key = tuple(sorted(cpus))
        if key in seen:
            continue
        seen.add(key)
        rungs.append(Actuation(threads, key, tuple(sorted(fastest)), power, rung=len(rungs), label=label))
    return rungs
