"""Markers for tests that the emulated aarch64 run (make test-arm, scripts/arm64_env.py) cannot run."""

from __future__ import annotations

import os

import pytest

# Why: under qemu-user a process cannot exec another ARM binary (no binfmt_misc: docs/arm.md), so
# a test that spawns sys.executable skips there; scripts/arm64_env.py sets EDGELLM_EMULATED.
needs_exec = pytest.mark.skipif("EDGELLM_EMULATED" in os.environ, reason="emulated: cannot exec itself")
