"""The gateway talks to the daemon over gRPC only: it imports neither the device nor the host side."""

from __future__ import annotations

import ast
from pathlib import Path

import edgellm.gateway

GATEWAY = Path(edgellm.gateway.__file__).parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_gateway_imports_no_device_or_host_code() -> None:
    found = [
        f"{f.name} imports {name}"
        for f in sorted(GATEWAY.rglob("*.py"))
        for name in sorted(_imports(f))
        if name.startswith(("edgellm.device", "edgellm.host", "edgellm.deploy"))
    ]
    assert found == []
