"""The gateway talks to the daemon over gRPC only: it imports neither the device nor the host side."""

from __future__ import annotations

from pathlib import Path

import edgellm.gateway
from tests.device.test_layers import imports_of

GATEWAY = Path(edgellm.gateway.__file__).parent


def test_the_gateway_imports_no_device_or_host_code() -> None:
    found = [
        f"{f.name} imports {name}"
        for f in sorted(GATEWAY.rglob("*.py"))
        for name in sorted(imports_of(f))
        if name.startswith(("edgellm.device", "edgellm.host", "edgellm.deploy"))
    ]
    assert found == []
