"""libandroid.so through ctypes: the NDK's thermal and performance-hint C APIs, from Termux's Python.

The functions live in the platform's libandroid.so (API 30+ for AThermal_*, 33+ for
APerformanceHint_*); an app process may dlopen it. On a host without it (this x86 machine) or on an
older Android the adapters report themselves unavailable with the reason, and tests pass a fake.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

LIBRARY = "libandroid.so"


def load(name: str = LIBRARY, loader: Callable[[str], Any] = ctypes.CDLL) -> tuple[Any | None, str]:
    """(library, "") or (None, why it could not be opened)."""
    try:
        return loader(name), ""
    except OSError as err:
        return None, f"{name} cannot be opened ({err}): not Android, or not allowed to this process"


def bind(lib: Any, name: str, restype: Any, argtypes: list[Any]) -> Any | None:
    """The C function `name` with its signature set, or None when the library lacks it (older API)."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        return None
    fn.restype = restype
    fn.argtypes = argtypes
    return fn
