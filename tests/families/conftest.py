"""One tiny checkpoint per family, converted and GPTQ-built once per session (issue 28, Prove-it).

`family_build(family, tmp_path_factory)` builds a family's tiny random-weight checkpoint with its
own chat template (`tests/tiny_families.build_tiny(..., chat=True)`), converts it with the default
preset through the conversion gate (`convert()`, as `edgellm convert` does), and builds a GPTQ
INT4 artifact of it, also gated. Results are memoised per process, so every test of a family
reuses the same two artifacts; `seconds` records each step's wall time for the report.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from edgellm.common.manifest import ArtifactManifest
from edgellm.device.config import DaemonConfig
from edgellm.device.rpc.server import RunningDaemon, start_server
from tests.tiny_families import build_tiny

# GPTQ on a few short samples: the tiny model needs no more, and each sample costs a forward per layer.
GPTQ_SAMPLES = 8
GPTQ_SEQ_LEN = 64
_MEMO: dict[str, FamilyBuild] = {}
_CHECKPOINTS: dict[str, Path] = {}


@dataclass(frozen=True)
class FamilyBuild:
    """A family's tiny checkpoint and the two artifacts built from it."""

    family: str
    hf: Path
    converted: Path
    gptq: Path
    manifests: dict[str, ArtifactManifest]
    seconds: dict[str, float] = field(default_factory=dict)


def family_build(family: str, tmp_path_factory: pytest.TempPathFactory) -> FamilyBuild:
    """The memoised build of FAMILY (checkpoint, gated convert, gated GPTQ INT4)."""
    if family not in _MEMO:
        _MEMO[family] = _build(family, tmp_path_factory.mktemp(f"family-{family}"), tmp_path_factory)
    return _MEMO[family]


def family_checkpoint(family: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FAMILY's tiny checkpoint with its chat template, built once per session (family_build's too)."""
    if family not in _CHECKPOINTS:
        _CHECKPOINTS[family] = build_tiny(family, tmp_path_factory.mktemp(f"hf-{family}"), chat=True)
    return _CHECKPOINTS[family]


def _build(family: str, root: Path, tmp_path_factory: pytest.TempPathFactory) -> FamilyBuild:
    from edgellm.host.builder.loaded import LoadedModel
    from edgellm.host.builder.pipeline import Measure, build_artifact
    from edgellm.host.convert.pipeline import convert
    from edgellm.host.evaluate.evaluate import EvalConfig
    from edgellm.host.quantize.plan import Calibration, preset, with_calibration

    seconds: dict[str, float] = {}
    start = time.perf_counter()
    hf = family_checkpoint(family, tmp_path_factory)
    seconds["checkpoint"] = time.perf_counter() - start
    start = time.perf_counter()
    converted = convert(str(hf), root / "converted")  # INT4 b32, lm_head INT8: the default preset
    seconds["convert"] = time.perf_counter() - start
    start = time.perf_counter()
    plan = with_calibration(
        preset("int4", method="gptq", block=32), Calibration(samples=GPTQ_SAMPLES, seq_len=GPTQ_SEQ_LEN)
    )
    loaded = LoadedModel.open(str(hf), EvalConfig())
    gptq = build_artifact(loaded, plan, root / "gptq", measure=Measure(evaluate=False, verify=True))
    seconds["gptq"] = time.perf_counter() - start
    return FamilyBuild(
        family=family,
        hf=hf,
        converted=root / "converted",
        gptq=gptq.path,
        manifests={"convert": converted, "gptq": gptq.manifest},
        seconds={k: round(v, 1) for k, v in seconds.items()},
    )


@pytest_asyncio.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    """A real daemon (MNN engine) with no model, on port 0."""
    config = DaemonConfig.of(port=0, data_dir=tmp_path / "data", disk_reserve_bytes=0, insecure_loopback=True)
    running = await start_server(config)
    yield running
    await running.stop(0)
