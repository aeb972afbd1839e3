"""The gateway's API key: made on first start (0600, like the daemon's token), rotated, re-read.

The key lives in `<config dir>/gateway-key` (`~/.config/edgellm/gateway-key`). The gateway makes it
on its first start unless given `--api-key-file`, `$EDGELLM_GATEWAY_API_KEY` or (loopback only)
`--no-api-key`. `edgellm token rotate` calls `rotate_gateway_key`; a running gateway notices the new
file (`KeyFile.current` re-reads it when its inode or mtime changes) and refuses the old key.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from edgellm.common.errors import FailedPrecondition
from edgellm.common.tokens import (
    WatchedSecret,
    gateway_key_path,
    new_token,
    read_token_file,
    write_secret,
    write_secret_exclusive,
)

__all__ = ["KeyFile", "ensure_gateway_key", "gateway_key_path", "read_key_file", "rotate_gateway_key"]


def read_key_file(path: Path) -> str:
    """The key in PATH; refuse a link, a file others can read, or an empty file (never "no key")."""
    if path.is_symlink():
        raise FailedPrecondition(f"{path} is a symbolic link; an API key file must be a regular file")
    return read_token_file(path)


def ensure_gateway_key(path: Path) -> str:
    """The key in PATH, made (random, 0600, exclusive create) when the file does not exist yet."""
    if not path.exists() and not path.is_symlink():
        with contextlib.suppress(FileExistsError):  # two first starts: the one that lost reads the winner's
            write_secret_exclusive(path, new_token())
    return read_key_file(path)


def rotate_gateway_key(path: Path) -> str:
    """Replace the key in PATH with a new random one, atomically (0600); return it."""
    key = new_token()
    write_secret(path, key)
    return key


class KeyFile(WatchedSecret):
    """The gateway's key file, re-read when it changes (rotation); a link, a file others can read
    or an empty one is refused at start (read_key_file)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, read_key_file)
