"""argparse types that refuse bad numbers at parse time (a usage message and exit 2, no traceback)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number(kind: type[int] | type[float], text: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {'an integer' if kind is int else 'a number'}"
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer in [low, high] (no upper bound when high is None)."""

    def parse(text: str) -> int:
        value = int(_number(int, text))
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in some of its messages
    return parse


def float_in(low: float, high: float = math.inf) -> Callable[[str], float]:
    """A finite number in [low, high]."""

    def parse(text: str) -> float:
        value = float(_number(float, text))
        if not low <= value <= high:
            bound = f"between {low:g} and {high:g}" if math.isfinite(high) else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value:g}")
        return value

    parse.__name__ = "number"
    return parse


positive_int = int_in(1)
non_negative_int = int_in(0)
port_number = int_in(0, 65535)  # 0 = any free port


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_size(text: str) -> int:
    """A byte count such as 0, 512M, 8G or 1.5T (binary units; a trailing B or iB is optional)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        value = float(t[: len(t) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 0, 512M or 8G") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a size of at least 0")
    return int(value)
