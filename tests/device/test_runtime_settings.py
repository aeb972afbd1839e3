"""The daemon starts from the artifact's MNN runtime settings and says when its own flags override them."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from edgellm.common.errors import FailedPrecondition
from edgellm.common.runtime import Runtime
from edgellm.device.config import DaemonConfig
from edgellm.device.core.daemon import DaemonCore
from edgellm.engine.config import KvQuant
from tests.fakes.fake_artifact import write_fake_artifact
from tests.fakes.fake_engine import FakeEngine


async def test_the_artifacts_runtime_settings_are_honoured_without_a_daemon_flag(tmp_path: Path) -> None:
    core = DaemonCore(DaemonConfig.of(port=0, data_dir=tmp_path, threads=3))
    try:
        runtime = Runtime(memory="normal", precision="high", dynamic_option=1, attention_mode=9)
        with capture_logs() as logs:
            cfg = core.models.engine_config(runtime)
        assert (cfg.memory, cfg.precision, cfg.dynamic_option, cfg.attention_mode) == ("normal", "high", 1, 9)
        assert cfg.threads == 3
        assert not [e for e in logs if e["event"] == "runtime_override"]
    finally:
        await core.close()


async def test_the_kv_quant_flag_overrides_the_artifact_and_logs_why(tmp_path: Path) -> None:
    core = DaemonCore(DaemonConfig.of(port=0, data_dir=tmp_path, kv_quant=KvQuant.FP))
    try:
        with capture_logs() as logs:
            cfg = core.models.engine_config(Runtime.for_kv_cache("int8_kv"))
        assert cfg.attention_mode == 8
        [override] = [e for e in logs if e["event"] == "runtime_override"]
        assert override["artifact"] == 10 and override["daemon"] == 8 and "--kv-quant" in override["reason"]
    finally:
        await core.close()


async def test_an_int8_k_artifact_cannot_slide_its_window_by_erase(tmp_path: Path) -> None:
    """MNN 3.6.1 truncates any quantized KV cache at an erase, INT8 keys alone included."""
    core = DaemonCore(DaemonConfig.of(port=0, data_dir=tmp_path, kv_window=256))
    try:
        with pytest.raises(FailedPrecondition, match="int8_k cannot slide the window by erase"):
            core.models.engine_config(Runtime.for_kv_cache("int8_k"))
    finally:
        await core.close()


async def test_a_load_hands_the_engine_the_settings_from_the_artifacts_manifest(tmp_path: Path) -> None:
    runtime = Runtime(memory="normal", precision="normal", dynamic_option=0, attention_mode=10)
    artifact = write_fake_artifact(tmp_path / "art", runtime=runtime)
    config = DaemonConfig.of(port=0, data_dir=tmp_path / "data", warmup=False)
    core = DaemonCore(config, FakeEngine.factory())
    try:
        await core.load(artifact)
        loaded = core.models.loaded
        assert loaded is not None and isinstance(loaded.engine, FakeEngine)
        cfg = loaded.engine.config
        assert (cfg.memory, cfg.precision, cfg.dynamic_option, cfg.attention_mode) == (
            "normal",
            "normal",
            0,
            10,
        )
    finally:
        await core.close()
