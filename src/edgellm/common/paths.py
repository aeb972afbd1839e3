"""Well-known locations: the source checkout (if any), the evaluation text, the artifact cache.

Nothing here depends on where the clone sits: the WikiText-2 splits ship inside the package
(`edgellm/data/*.txt.gz`) and are unpacked once into the cache; the cache is the checkout's
`.cache/` when running from a source tree, else the user's cache directory.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from importlib import resources
from pathlib import Path

DATA_ENV = "EDGELLM_DATA_DIR"
CACHE_ENV = "EDGELLM_CACHE_DIR"

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # src/edgellm
# The packaged texts and the sha256 of their uncompressed bytes (checked when unpacked).
PACKAGED_DATA: dict[str, str] = {
    "wikitext2-test.txt": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
    "wikitext2-valid.txt": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
}


def source_root() -> Path | None:
    """The checkout this package runs from (editable install or src on the path), else None."""
    root = _PACKAGE_ROOT.parents[1]  # src/edgellm → the checkout
    if (root / "pyproject.toml").is_file() and (root / "src" / "edgellm") == _PACKAGE_ROOT:
        return root
    return None


def cache_dir() -> Path:
    """Built artifacts, converted checkpoints, unpacked data.

    $EDGELLM_CACHE_DIR, else `<checkout>/.cache` in a source tree (where `make` builds the default
    artifact), else `$XDG_CACHE_HOME/edgellm` (default `~/.cache/edgellm`) for an installed package.
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    root = source_root()
    if root is not None:
        return root / ".cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "edgellm"


def data_dir() -> Path:
    """The directory holding wikitext2-test.txt and wikitext2-valid.txt.

    $EDGELLM_DATA_DIR when set (your own copy or other texts); else the splits shipped with the
    package, unpacked once into `cache_dir()/data`.
    """
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    out = cache_dir() / "data"
    for name, sha in PACKAGED_DATA.items():
        _unpack(name, sha, out)
    return out


def require_data_file(name: str) -> Path:
    """`data_dir() / name`, or FileNotFoundError saying where it was looked for (checked before long work)."""
    path = data_dir() / name
    if not path.is_file():
        hint = f"${DATA_ENV} is {os.environ[DATA_ENV]!r}" if os.environ.get(DATA_ENV) else "the package data"
        raise FileNotFoundError(
            f"{name} not found at {path} ({hint}); unset ${DATA_ENV} to use the copy shipped with edgellm"
        )
    return path


def _unpack(name: str, sha256: str, out: Path) -> None:
    target = out / name
    if target.is_file() and target.stat().st_size > 0:
        return
    packed = resources.files("edgellm.data").joinpath(f"{name}.gz").read_bytes()
    data = gzip.decompress(packed)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"packaged {name} is corrupt (sha256 mismatch); reinstall edgellm")
    out.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(target)  # atomic: a concurrent reader sees the whole file or none


def default_artifact_dir() -> Path:
    """The cached default artifact built by `make artifact` / `edgellm convert --model default`."""
    return cache_dir() / "artifacts" / "default"


def resolve_artifact(arg: str | Path) -> Path:
    """An artifact argument: the word `default` means the cached default artifact, else a path."""
    return default_artifact_dir() if str(arg) == "default" else Path(arg)
