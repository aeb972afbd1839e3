"""Mixed and auto plans per family, end to end: plan -> quantize -> export -> gate -> push -> Generate.

Per family, on its tiny checkpoint (tests/families/conftest.py, shared with test_end_to_end.py):

- the sensitive-layers plan (attention q/k/v, the first and the last block INT8, the rest INT4,
  GPTQ; tests/quantize/test_family_plans.py checks what each linear gets) is built through the
  conversion gate;
- `--plan auto` (RTN base, a size budget so one candidate is exported) is searched, exported and
  gated, and records a plan whose INT8 rules name the family's own linears (Phi-3: qkv_proj);
- both artifacts are pushed to a real daemon (MNN engine), loaded, and answer Generate over gRPC.

Cost: two exports and two gates per family. phi3 runs by default (its fused qkv/gate_up are the
family-specific part of a plan); the others are `-m slow` (measured times in docs/models.md).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from edgellm.cli import main
from edgellm.common.artifact_files import read_manifest
from edgellm.device.rpc.server import RunningDaemon
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc
from tests.families.conftest import GPTQ_SAMPLES, GPTQ_SEQ_LEN, family_checkpoint
from tests.tiny_families import FAMILIES, LAYERS, sensitive_plan

DEFAULT_FAMILIES = ("phi3",)
CASES = [pytest.param(f, marks=() if f in DEFAULT_FAMILIES else pytest.mark.slow) for f in sorted(FAMILIES)]
# GPTQ on conftest's few short samples: the tiny model needs no more.
SENSITIVE: dict[str, Any] = {
    **sensitive_plan("gptq"),
    "calibration": {"samples": GPTQ_SAMPLES, "seq_len": GPTQ_SEQ_LEN},
}
_MEMO: dict[str, PlanBuilds] = {}


@dataclass(frozen=True)
class PlanBuilds:
    """A family's sensitive-layers artifact, its auto artifact and the auto search's result."""

    family: str
    mixed: Path
    auto: Path
    auto_result: dict[str, Any]
    seconds: dict[str, float]


def _builds(family: str, tmp_path_factory: pytest.TempPathFactory) -> PlanBuilds:
    if family not in _MEMO:
        _MEMO[family] = _build(
            family, family_checkpoint(family, tmp_path_factory), tmp_path_factory.mktemp(family)
        )
    return _MEMO[family]


def _build(family: str, hf: Path, root: Path) -> PlanBuilds:
    from edgellm.host.builder.loaded import LoadedModel
    from edgellm.host.builder.pipeline import Measure, build_artifact, quantize
    from edgellm.host.evaluate.evaluate import EvalConfig
    from edgellm.host.quantize.auto import search_plan
    from edgellm.host.quantize.plan import plan_from_json, preset

    seconds: dict[str, float] = {}
    loaded = LoadedModel.open(str(hf), EvalConfig(tokens=512, context=256, stride=256))
    start = time.perf_counter()
    build_artifact(
        loaded, plan_from_json(SENSITIVE), root / "mixed", measure=Measure(evaluate=False, verify=True)
    )
    seconds["mixed"] = time.perf_counter() - start
    start = time.perf_counter()
    base = preset("int4", method="rtn", block=32)
    int4 = quantize(loaded, base).weights
    # Room for some INT8 units but not all (phi3: 11 of 16): the plan mixes INT8 rules with the INT4 base.
    size = (
        sum(q.n_bytes() for q in int4.values())
        + sum(q.n_bytes() for n, q in int4.items() if n != "lm_head") // 3
    )
    result = search_plan(loaded, base, 0.5, root / "auto", size_budget=size, verify=True)
    seconds["auto"] = time.perf_counter() - start
    return PlanBuilds(
        family, root / "mixed", root / "auto", result, {k: round(v, 1) for k, v in seconds.items()}
    )


@pytest.fixture
def builds(family: str, tmp_path_factory: pytest.TempPathFactory) -> PlanBuilds:
    """FAMILY's two plan artifacts (built once per session)."""
    built = _builds(family, tmp_path_factory)
    print(f"{family}: seconds {built.seconds}")
    return built


@pytest.mark.parametrize("family", CASES)
def test_the_sensitive_layers_and_auto_plans_pass_the_gate_with_the_plan_recorded(builds: PlanBuilds) -> None:
    from edgellm.host.quantize.plan import plan_from_json

    mixed, _ = read_manifest(builds.mixed)
    assert mixed.checks is not None and mixed.checks.fidelity_decode is not None  # the gate raised if out
    assert (
        mixed.quantization.plan == plan_from_json(SENSITIVE).to_json() and mixed.quantization.round_trip_exact
    )
    auto, _ = read_manifest(builds.auto)
    assert auto.checks is not None and auto.checks.fidelity_decode is not None
    assert auto.quantization.round_trip_exact
    plan = plan_from_json(auto.quantization.plan)
    k = builds.auto_result["auto"]["units_int8"]
    assert plan.name == "auto" and 0 < k < 4 * LAYERS and plan.rules
    shorts = {r.pattern.split(".", 3)[-1] for r in plan.rules}
    fused = builds.family == "phi3"
    assert not shorts & ({"self_attn.q_proj", "mlp.gate_proj"} if fused else {"self_attn.qkv_proj"})
    print(f"{builds.family}: mixed {mixed.checks.fidelity_decode}; auto k={k} {auto.checks.fidelity_decode}")


@pytest.mark.parametrize("family", CASES)
async def test_the_plan_artifacts_serve_generate(builds: PlanBuilds, daemon: RunningDaemon) -> None:
    target = f"127.0.0.1:{daemon.port}"
    for artifact in (builds.mixed, builds.auto):
        push = ["push", str(artifact), "--target", target, "--insecure-loopback"]
        assert await asyncio.to_thread(main, push) == 0
    installed = daemon.core.store.installed()
    assert len(installed) == 2
    async with grpc.aio.insecure_channel(target) as channel:
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        for installed_artifact in installed:
            await stub.LoadModel(device_pb2.LoadModelRequest(model=installed_artifact.artifact_id))
            request = device_pb2.GenerateRequest(
                messages=[common_pb2.ChatMessage(role="user", content="What is the capital of France?")],
                max_new_tokens=8,
                sampling=device_pb2.SamplingParams(temperature=0.0),
            )
            tokens = [t async for r in stub.Generate(request) for t in r.token_ids]
            assert tokens, installed_artifact.artifact_id
