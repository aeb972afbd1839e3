"""Token and key rotation (M3): new secrets in the files that servers watch, old ones refused at once.

The daemon, the host service and the gateway re-read their secret file when it changes
(`edgellm.common.tokens.WatchedSecret`), so rotation needs no restart. Files that held one shared token
get one shared new token (clients keep finding one token for both); files that differed stay apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgellm.common.errors import FailedPrecondition
from edgellm.common.tokens import (
    daemon_token_path,
    gateway_key_path,
    host_token_path,
    new_token,
    read_token_file,
    write_secret,
)


@dataclass(frozen=True)
class Rotated:
    """One rotated secret: what it is for and where it lives (never the value)."""

    what: str
    path: Path


def secret_files(data_dir: Path | None = None) -> dict[str, Path]:
    """{name: file} of every secret `edgellm token rotate` knows, on this machine."""
    return {
        "daemon": daemon_token_path(data_dir),
        "host": host_token_path(),
        "gateway": gateway_key_path(),
    }


def rotate(which: tuple[str, ...] = (), data_dir: Path | None = None) -> list[Rotated]:
    """Write new secrets into WHICH (names of secret_files; () = every file that exists)."""
    files = secret_files(data_dir)
    unknown = set(which) - set(files)
    if unknown:
        raise FailedPrecondition(f"unknown secret {sorted(unknown)}; choose from {sorted(files)}")
    chosen = {name: files[name] for name in (which or tuple(files)) if which or files[name].exists()}
    if not chosen:
        raise FailedPrecondition(
            "no token or key file exists on this machine yet (a daemon, host service or gateway "
            f"makes its own on first start): looked for {', '.join(str(p) for p in files.values())}"
        )
    old = {name: _read_or_none(path) for name, path in chosen.items()}
    fresh: dict[str | None, str] = {}
    done = []
    for name, path in chosen.items():
        # One new value per old value: files that shared a token keep sharing the new one.
        key = old[name] if old[name] is not None else f"<new {name}>"
        value = fresh.setdefault(key, new_token())
        write_secret(path, value)
        done.append(Rotated(name, path))
    return done


def _read_or_none(path: Path) -> str | None:
    try:
        return read_token_file(path)
    except (OSError, FailedPrecondition):
        return None
