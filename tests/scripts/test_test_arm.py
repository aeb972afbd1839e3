"""scripts/test_arm.py's list of device unit tests stays in step with the tree (runs on x86, in make test)."""

from __future__ import annotations

from pathlib import Path

from scripts.test_arm import DEVICE_UNIT_TESTS

REPO = Path(__file__).resolve().parents[2]


def test_every_emulated_unit_test_file_exists() -> None:
    """A moved test file once made `make test-arm` stop at its first step ("file not found")."""
    missing = [path for path in DEVICE_UNIT_TESTS if not (REPO / path).is_file()]
    assert not missing, f"scripts/test_arm.py lists files that are gone: {missing}"
