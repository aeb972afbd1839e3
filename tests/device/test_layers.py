"""The daemon's imports flow one way: rpc -> core -> (engine, governor -> telemetry, store).

Checked on the source with `ast`, so a new upward import fails here, not in a review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import edgellm.device

DEVICE = Path(edgellm.device.__file__).parent

# (package under device/, what it must not import)
FORBIDDEN = [
    ("core", ("edgellm.device.rpc", "edgellm.v1")),  # the core knows nothing of gRPC messages
    ("governor", ("edgellm.device.core", "edgellm.device.rpc", "edgellm.v1")),
    ("telemetry", ("edgellm.device.governor", "edgellm.device.core", "edgellm.device.rpc", "edgellm.v1")),
    ("store", ("edgellm.device.core", "edgellm.device.rpc", "edgellm.v1")),
    ("constrain", ("edgellm.device.core", "edgellm.device.rpc", "edgellm.v1")),
]
DOMAIN_MODULES = ("generation", "sampler", "text", "worker", "push", "admission")


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def violations(files: list[Path], banned: tuple[str, ...]) -> list[str]:
    return [
        f"{f.relative_to(DEVICE)} imports {name}"
        for f in files
        for name in sorted(imports_of(f))
        if name.startswith(banned)
    ]


def test_lower_layers_never_import_upper_ones() -> None:
    found = []
    for package, banned in FORBIDDEN:
        found += violations(sorted((DEVICE / package).rglob("*.py")), banned)
    assert found == []


def test_the_domain_modules_import_neither_the_core_nor_grpc_messages() -> None:
    files = [DEVICE / f"{name}.py" for name in DOMAIN_MODULES]
    assert violations(files, ("edgellm.device.core", "edgellm.device.rpc", "edgellm.v1")) == []


def test_common_imports_none_of_the_programs() -> None:
    """`edgellm.common` is shared by host, device and client, so it may import none of them."""
    common = DEVICE.parent / "common"
    banned = ("edgellm.device", "edgellm.host", "edgellm.client", "edgellm.cli", "edgellm.deploy")
    found = [
        f"common/{f.relative_to(common)} imports {name}"
        for f in sorted(common.rglob("*.py"))
        for name in sorted(imports_of(f))
        if name.startswith(banned)
    ]
    assert found == []


def test_the_engine_package_imports_none_of_the_programs() -> None:
    """`edgellm.engine` sits under device, host and client; only its wire.py speaks proto."""
    engine = DEVICE.parent / "engine"
    programs = ("edgellm.device", "edgellm.host", "edgellm.client", "edgellm.cli", "edgellm.deploy")
    files = sorted(engine.rglob("*.py"))
    found = [
        f"engine/{f.name} imports {name}"
        for f in files
        for name in sorted(imports_of(f))
        if name.startswith(programs) or (name.startswith("edgellm.v1") and f.name != "wire.py")
    ]
    assert files and found == []
