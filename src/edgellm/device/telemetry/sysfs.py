"""Small helpers to read sysfs/procfs files with a fallback instead of an exception."""

from __future__ import annotations

from pathlib import Path


def read_text(path: Path) -> str | None:
    """The stripped file content, or None when it is missing or unreadable (SELinux, EACCES...)."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_int(path: Path) -> int | None:
    """An integer file, or None."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3 5' or '0-3,5' → (0, 1, 2, 3, 5)."""
    cpus: list[int] = []
    for part in text.replace(",", " ").split():
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return tuple(sorted(set(cpus)))
