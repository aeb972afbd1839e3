"""Memory admission: the memory model's figures against MemAvailable from a fake /proc tree."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from edgellm.common.errors import ResourceExhausted
from edgellm.device.admission import MIB, admit, memory_need
from edgellm.device.config import DaemonConfig
from edgellm.device.core.daemon import DaemonCore
from edgellm.device.core.memory import check_memory
from edgellm.device.core.state import ConfigUpdate
from edgellm.device.telemetry.process import MemInfo, read_meminfo
from edgellm.engine.artifact import Artifact
from tests.fakes.fake_artifact import write_fake_artifact
from tests.fakes.fake_engine import FakeEngine
from tests.manifests import manifest_for

FP = 8  # MNN attention_mode with a float KV cache
MARGIN = 256 * MIB


def smollm2(size: int = 119_325_093) -> Artifact:
    """An artifact with SmolLM2-135M's shape (tests/manifests.SHAPE) and its int4 artifact's size."""
    entry = {"path": "llm.mnn.weight", "size": size, "sha256": "0" * 64}
    return Artifact(Path("/nowhere"), manifest_for([entry], "smollm2"), "0" * 64)


def meminfo(root: Path, available_mib: int) -> Path:
    """A fake /proc tree under ROOT whose MemAvailable is AVAILABLE_MIB."""
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/meminfo").write_text(
        f"MemTotal: 8000000 kB\nMemFree: 100000 kB\nMemAvailable: {available_mib * 1024} kB\n"
    )
    return root


def test_a_model_that_fits_is_admitted(tmp_path: Path) -> None:
    need = memory_need(smollm2(), 4096, MARGIN, FP)
    admit(need, MemInfo(8 << 30, need.total))


def test_the_need_is_weights_runtime_and_kv_at_the_budget() -> None:
    need = memory_need(smollm2(), 2048, MARGIN, FP)
    e = need.estimate
    # Measured for SmolLM2 int4 (docs/engine.md): 133 MiB of weights, ~45 MiB of runtime after the
    # warm-up, 218 MiB more at 2,048 positions; the model must stay within 10% of each.
    assert 120 * MIB < e.weights < 146 * MIB
    assert 25 * MIB < e.runtime < 50 * MIB
    assert 196 * MIB < e.kv < 240 * MIB
    assert need.total == e.weights + e.runtime + e.kv + MARGIN


def test_a_model_that_does_not_fit_is_refused_with_the_numbers_and_the_context_that_fits() -> None:
    artifact = smollm2()
    need = memory_need(artifact, 4096, MARGIN, FP)
    have = need.total - 100 * MIB
    with pytest.raises(ResourceExhausted) as err:
        admit(need, MemInfo(8 << 30, have))
    text = str(err.value)
    assert f"needs {need.total // MIB} MiB" in text and f"{have // MIB} MiB available" in text
    assert "weights" in text and "runtime" in text and "KV" in text and "at 4096 tokens" in text
    match = re.search(r"context of (\d+) tokens", text)
    assert match is not None
    fit = int(match.group(1))
    assert fit % 256 == 0 and 0 < fit < 4096
    assert memory_need(artifact, fit, MARGIN, FP).total <= have  # the number given does fit
    assert memory_need(artifact, fit + 256, MARGIN, FP).total > have  # and is the largest that does


def test_when_no_context_fits_it_says_to_quantize_smaller_or_close_apps() -> None:
    need = memory_need(smollm2(), 4096, MARGIN, FP)
    with pytest.raises(ResourceExhausted, match="no context fits: use a smaller model"):
        admit(need, MemInfo(8 << 30, MARGIN + need.estimate.weights))


def test_an_8_bit_artifact_is_told_of_a_4_bit_build() -> None:
    art = smollm2()
    manifest = replace(art.manifest, quantization=replace(art.manifest.quantization, bits=8))
    need = memory_need(replace(art, manifest=manifest), 4096, MARGIN, FP)
    with pytest.raises(ResourceExhausted, match=r"tokens .* a 4-bit build \(convert --bits 4\)"):
        admit(need, MemInfo(8 << 30, need.total - 100 * MIB))


def test_unloading_the_current_model_counts_as_available() -> None:
    need = memory_need(smollm2(), 4096, MARGIN, FP)
    admit(need, MemInfo(8 << 30, need.total - 50 * MIB), freed_by_unload=50 * MIB)


def test_check_memory_reads_memavailable_from_the_proc_tree_and_the_kv_window(tmp_path: Path) -> None:
    artifact = smollm2()
    root = meminfo(tmp_path, memory_need(artifact, 1024, MARGIN, FP).total // MIB + 1)
    assert read_meminfo(root).available_bytes > 0
    config = DaemonConfig.of(port=0, data_dir=tmp_path / "data", proc_root=root, kv_window=1024)
    check_memory(config, artifact, FP, 0)  # fits at a 1,024-token window
    with pytest.raises(ResourceExhausted, match="at 4096 tokens"):  # not at the 4,096-token budget
        check_memory(config.with_settings(kv_window=0), artifact, FP, 0)


async def test_update_config_refuses_a_kv_window_that_memavailable_cannot_fill(tmp_path: Path) -> None:
    root = meminfo(tmp_path / "root", 4096)
    art = write_fake_artifact(tmp_path / "art", context_length=32768)
    config = DaemonConfig.of(port=0, data_dir=tmp_path / "data", proc_root=root, warmup=False)
    core = DaemonCore(config, FakeEngine.factory())
    try:
        await core.load(art)
        await core.update(ConfigUpdate(kv_window=1024))  # plenty
        meminfo(tmp_path / "root", 256 + 2)  # the margin and 2 MiB: ~1,700 positions of this shape
        with pytest.raises(ResourceExhausted, match=r"KV window of 16384 tokens.*ask for at most \d+ tokens"):
            await core.update(ConfigUpdate(kv_window=16384))
        assert core.config.kv.kv_window == 1024  # nothing changed
    finally:
        await core.close()
