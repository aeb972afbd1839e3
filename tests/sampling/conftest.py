"""A fake-engine daemon whose artifact records sampling defaults, and gateways in front of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgellm.common.sampling_defaults import SamplingDefaults
from tests.fakes.fake_artifact import write_fake_artifact
from tests.gateway.conftest import start_daemon, start_gw  # noqa: F401  (fixtures, shared)
from tests.rpc.conftest import start_fake  # noqa: F401  (fixture, shared)

# What a generation_config.json with do_sample, temperature 0.6, top_p 0.9 and top_k 20 records.
TINY = SamplingDefaults("generation_config", temperature=0.6, top_k=20, top_p=0.9, repetition_penalty=1.0)


@pytest.fixture(scope="module")
def fake_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake artifact, recording TINY as its model's sampling defaults (overrides tests/rpc's)."""
    return write_fake_artifact(tmp_path_factory.mktemp("fake-sampling"), sampling=TINY)
