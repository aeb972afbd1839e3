"""Draw telemetry or simulation traces: temperature, tokens/s, threads and pacing over time."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgellm.common.errors import FailedPrecondition, InvalidArgument

INSTALL_HINT = "pip install 'edgellm[plot]'"


def require_matplotlib() -> None:
    """Refuse (FailedPrecondition) when matplotlib is missing: the `plot` extra, not on the phone."""
    if importlib.util.find_spec("matplotlib") is None:
        raise FailedPrecondition(f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}")


def plot_path(out: Path) -> Path:
    """The file a plot to OUT is written to, checked before any work: `.png` added to a name
    without a suffix (what matplotlib's savefig writes); InvalidArgument for a type it cannot write."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = out.suffix.lower().removeprefix(".")
    if not suffix:
        return out.with_name(out.name + ".png")
    if suffix not in FigureCanvasBase.get_supported_filetypes():
        raise InvalidArgument(
            f"--plot {out}: matplotlib cannot write .{suffix} files; name the image .png (or .svg, .pdf)"
        )
    return out


@dataclass
class Trace:
    """One labelled series set over time (seconds)."""

    label: str
    t_s: list[float] = field(default_factory=list)
    temps: dict[str, list[float]] = field(default_factory=dict)  # e.g. {"skin": [...], "die": [...]}
    tokens_per_second: list[float] = field(default_factory=list)
    rung: list[float] = field(default_factory=list)  # governor ladder position, 0 = fastest
    threads: list[float] = field(default_factory=list)  # optional: inference threads
    pacing_ms: list[float] = field(default_factory=list)


def plot_traces(traces: Sequence[Trace], out: Path, title: str = "") -> None:
    """Four stacked panels sharing the time axis; writes a PNG (matplotlib: the `plot` extra)."""
    require_matplotlib()
    import logging

    # Why: the first import of pyplot on a machine logs "Matplotlib is building the font cache;
    # this may take a moment." through this logger, which our logging prints as a warning line.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    import matplotlib

    matplotlib.use("Agg")  # no display on a phone or in CI
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
    for tr in traces:
        minutes = [t / 60.0 for t in tr.t_s]
        for name, values in tr.temps.items():
            axes[0].plot(minutes, values, label=f"{tr.label} {name}")
        axes[1].plot(minutes, tr.tokens_per_second, label=tr.label)
        axes[2].step(minutes, tr.rung, where="post", label=f"{tr.label} rung")
        if tr.threads:
            axes[2].step(minutes, tr.threads, where="post", linestyle=":", label=f"{tr.label} threads")
        axes[3].plot(minutes, tr.pacing_ms, label=tr.label)
    axes[2].yaxis.get_major_locator().set_params(integer=True)
    labels = ("°C", "tokens/s", "rung (0 = fastest) / threads", "pacing ms")
    for ax, ylabel in zip(axes, labels, strict=True):
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[-1].set_xlabel("minutes")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
