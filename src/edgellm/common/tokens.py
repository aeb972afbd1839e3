"""Where bearer tokens live, how they are made, and how a client finds one without flags.

Two files, both 0600:
- the daemon's own token, `<data dir>/token` (`~/.edgellm/token`; on the phone, in Termux's home),
  made by the installer or by the first `edgellm daemon` start;
- the host's token, `<config dir>/token` (`~/.config/edgellm/token`): the token `edgellm deploy
  device` fetched from the phone, or the one the host service made on its first start.
A new token is random (`secrets`), unless the other file already exists on this machine: then it
is adopted, so one user's daemon and host service share one token.

A client takes, in order: an explicit token, `$EDGELLM_TOKEN`, the host's token file, then the
token of a daemon this user runs on this machine (`~/.edgellm/token`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.durable import write_fresh
from edgellm.common.errors import FailedPrecondition
from edgellm.common.logs import get_logger

log = get_logger(__name__)

TOKEN_ENV = "EDGELLM_TOKEN"
CONFIG_DIR_ENV = "EDGELLM_CONFIG_DIR"  # the host's config dir (tests point it at a temporary one)
HOME_ENV = "EDGELLM_HOME"  # the daemon's default data dir
TOKEN_FILE = "token"
TARGETS_DIR = "tokens"
GATEWAY_KEY_FILE = "gateway-key"
TOKEN_BYTES = 32  # 256 bits, as `secrets` recommends for tokens (token_urlsafe -> 43 characters)


def config_dir() -> Path:
    """$EDGELLM_CONFIG_DIR, else $XDG_CONFIG_HOME/edgellm, else ~/.config/edgellm."""
    explicit = os.environ.get(CONFIG_DIR_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "edgellm"


def default_data_dir() -> Path:
    """The daemon's data dir: $EDGELLM_HOME, else ~/.edgellm."""
    explicit = os.environ.get(HOME_ENV)
    return Path(explicit) if explicit else Path.home() / ".edgellm"


def gateway_key_path() -> Path:
    """The gateway's API key file, `<config dir>/gateway-key` (made on its first start)."""
    return config_dir() / GATEWAY_KEY_FILE


def target_token_path(target: str) -> Path:
    """The token for one daemon address, `<config dir>/tokens/<host>_<port>`: a phone's, fetched by
    `edgellm deploy device` for its forwarded port (L14: the phone's token is not the host's)."""
    return config_dir() / TARGETS_DIR / re.sub(r"[^A-Za-z0-9.-]+", "_", target.strip()).strip("_")


def host_token_path() -> Path:
    """The host's token file (what clients send; what the host service requires)."""
    return config_dir() / TOKEN_FILE


def daemon_token_path(data_dir: Path | None = None) -> Path:
    """The daemon's token file in its data dir."""
    return (data_dir or default_data_dir()) / TOKEN_FILE


def new_token() -> str:
    """A fresh random token (URL-safe, 43 characters)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def write_secret(path: Path, text: str) -> None:
    """Write TEXT to PATH with mode 0600, atomically (a temp file created 0600, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    write_fresh(tmp, (text.strip() + "\n").encode(), 0o600)
    try:
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def check_secret_file(path: Path) -> None:
    """Refuse a secret file other users can read, that another user owns, or whose directory
    another user can write (they could swap the file): as ssh refuses such a key (L11)."""
    st = path.stat()
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise FailedPrecondition(
            f"{path} is readable by other users (mode {stat.S_IMODE(st.st_mode):o}); run `chmod 600 {path}`"
        )
    uid = os.getuid()
    if st.st_uid != uid:
        raise FailedPrecondition(f"{path} belongs to another user (uid {st.st_uid}); use a file of your own")
    parent = path.resolve().parent.stat()
    if parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not parent.st_mode & stat.S_ISVTX:
        raise FailedPrecondition(
            f"{path.parent} can be written by other users, who could replace {path.name}; "
            f"run `chmod go-w {path.parent}` or keep the file elsewhere"
        )


def read_token_file(path: Path) -> str:
    """The token in PATH; refuse a file others can read or swap (check_secret_file)."""
    check_secret_file(path)
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise FailedPrecondition(f"{path} is empty; delete it and restart to make a new token")
    return token


def ensure_token(path: Path, adopt: tuple[Path, ...] = ()) -> str:
    """The token in PATH; when missing, create it (0600) from the first readable ADOPT file, else random.

    Why adopt: the daemon and the host service on one machine then share one token, so a client
    that finds either file reaches both (whichever starts first makes it).
    """
    if not path.exists():
        # Why a rendezvous file: the daemon and the host service starting together (the README
        # starts both) each found no file to adopt and made two tokens. Both now create the same
        # first file of {PATH} ∪ ADOPT in sorted order exclusively, so one token wins everywhere.
        seed = next((read_token_file(p) for p in adopt if p != path and p.is_file()), None)
        if seed is None:
            rendezvous = min((path, *adopt), key=str)
            with contextlib.suppress(FileExistsError):  # another process made it first: use theirs
                write_secret_exclusive(rendezvous, new_token())
            seed = read_new_secret(rendezvous)
        with contextlib.suppress(FileExistsError):
            write_secret_exclusive(path, seed)
    return read_new_secret(path)


def write_secret_exclusive(path: Path, text: str) -> None:
    """Create PATH (0600) with TEXT; FileExistsError when it exists (two first starts race safely)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    write_fresh(tmp, (text + "\n").encode(), 0o600)
    try:
        os.link(tmp, path)  # fails if PATH exists, unlike rename
    except FileExistsError:
        raise
    except OSError:
        # Why a fallback: Android's SELinux refuses link(2) in app data on many phones (EACCES or
        # EPERM), which took the daemon down at its first start (M3). O_EXCL on the final name is
        # as exclusive; a reader can see the file before its bytes land, so readers of a fresh
        # file wait for its newline (read_new_secret).
        write_fresh(path, (text + "\n").encode(), 0o600)
    finally:
        tmp.unlink(missing_ok=True)


def read_new_secret(path: Path, wait_s: float = 2.0) -> str:
    """read_token_file for a file another process may be writing right now (see write_secret_exclusive)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if path.read_bytes().endswith(b"\n") or time.monotonic() > deadline:
                return read_token_file(path)
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.01)


class WatchedSecret:
    """A secret file a running server checks against, re-read whenever the file changes.

    Why: `edgellm token rotate` writes new token and key files; the daemon, the host service and
    the gateway then refuse the old secret at once, without a restart. One `stat` per check costs
    microseconds. A file that became unreadable or bad keeps the last good value (logged once per
    change): a broken rotation must neither open the server nor lock every client out.

    READ reads and checks the file (read_token_file, or the gateway's read_key_file); VALUE is what
    the server already read at start (None: read now, and raise when the file is bad).
    """

    def __init__(
        self, path: Path, read: Callable[[Path], str] = read_token_file, value: str | None = None
    ) -> None:
        self.path = path
        self._read = read
        self._stamp = _file_stamp(path)
        self._value = read(path) if value is None else value

    def current(self) -> str:
        """The secret now in the file (read again only when the file changed)."""
        stamp = _file_stamp(self.path)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._value = self._read(self.path)
                log.info("secret_reloaded", path=str(self.path))
            except (OSError, FailedPrecondition) as exc:
                log.warning("secret_reload_failed", path=str(self.path), error=str(exc))
        return self._value


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    """(inode, mtime, size): changes on every rewrite, an atomic rename included."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass(frozen=True)
class FoundToken:
    """A token a client will send, and where it came from (for error messages)."""

    token: str
    source: str


def find_client_token(
    explicit: str | None = None, token_file: Path | None = None, target: str | None = None
) -> FoundToken | None:
    """The token a client sends: explicit, file, $EDGELLM_TOKEN, TARGET's own file (a deployed
    phone's), the host's file, the local daemon's."""
    if explicit:
        return FoundToken(explicit, "--token")
    if token_file is not None:
        return FoundToken(read_token_file(token_file), str(token_file))
    env = os.environ.get(TOKEN_ENV)
    if env:
        return FoundToken(env, f"${TOKEN_ENV}")
    own = (target_token_path(target),) if target else ()
    for path in (*own, host_token_path(), daemon_token_path()):
        if path.is_file():
            return FoundToken(read_token_file(path), str(path))
    return None
