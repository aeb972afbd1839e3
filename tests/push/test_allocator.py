"""edgellm.common.allocator: applied on glibc (this test host), a no-op elsewhere."""

from __future__ import annotations

import platform

import pytest

from edgellm.common import allocator


def test_applies_on_glibc_and_is_idempotent() -> None:
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not a glibc host")
    assert allocator.tune_for_streaming() and allocator.tune_for_streaming()


def test_leaves_other_c_libraries_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("platform.libc_ver", lambda: ("bionic", ""))
    assert not allocator.tune_for_streaming()
