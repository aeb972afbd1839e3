"""Where quantization computes (quantize/device.py): the choice, the refusal, and unchanged CPU results.

No GPU on the machines these tests run on: the CUDA branch of the choice is driven with a fake
``cuda_available`` (named as such); the per-layer moves to a GPU are not exercised here.
"""

from __future__ import annotations

import copy
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgellm.common.errors import InvalidArgument
from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.quantize.apply import quantize_model
from edgellm.host.quantize.device import CPU, choose_device, layer_on
from edgellm.host.quantize.plan import Calibration, preset, with_calibration


def fake_gpu_present() -> bool:
    """A fake: torch would see a GPU."""
    return True


def fake_no_gpu() -> bool:
    """A fake: torch sees none."""
    return False


def test_auto_takes_cuda_when_torch_sees_a_gpu_and_the_cpu_otherwise() -> None:
    named = lambda d: f"fake {d.type}"  # noqa: E731
    assert choose_device("auto", cuda_available=fake_gpu_present, name_of=named) == torch.device("cuda")
    assert choose_device("auto", cuda_available=fake_no_gpu) == CPU
    assert choose_device("cpu", cuda_available=fake_gpu_present) == CPU


def test_cuda_without_a_gpu_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(InvalidArgument, match=r"--device cuda: torch .* sees no CUDA GPU; use --device cpu"):
        choose_device("cuda", cuda_available=fake_no_gpu)
    with pytest.raises(InvalidArgument, match="choose one of auto, cpu, cuda"):
        choose_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU: --device cuda is accepted")
@pytest.mark.parametrize("command", ["quantize", "convert"])
def test_cli_refuses_device_cuda_without_a_gpu_before_any_loading(command: str, tmp_path: Path) -> None:
    out = tmp_path / "art"
    proc = subprocess.run(
        [sys.executable, "-m", "edgellm.cli", command, "--device", "cuda", "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"edgellm {command}: --device cuda: torch" in proc.stderr
    assert "load" not in proc.stderr.split("--device cuda")[0]  # nothing loaded before the refusal
    assert not out.exists()


def test_layer_on_the_cpu_moves_nothing_and_sets_no_default_device() -> None:
    lin = torch.nn.Linear(4, 4)
    weight = lin.weight
    with layer_on(CPU, lin):
        assert torch.zeros(1).device == CPU
    assert lin.weight is weight


# sha256 of every QuantizedWeight (codes, scale, zero) and of the quantized state_dict, recorded
# with the code before quantize/device.py existed (28cb2c1^, torch 2.13 CPU): CPU results are bit for
# bit. Per CPU kernel family: AWQ's scale search picks by float losses, and torch's AVX-512 and AVX2
# matmuls sum in different orders, so its bytes differ between the two (measured: the pre-device
# code on an AVX2-only AMD EPYC gives the AVX2 digest below). GPTQ's agree on both.
BEFORE = {
    "AVX512": {
        "gptq": "478360da945e3fc39c2594338f7849e95b8ddb33818135e12fbdafaca4ac3a4e",
        "awq": "d8b7b2d6b960f6e97c69ea28219e30aaf1cb8c00ee6cb07d894385ef9a7f0e61",
    },
    "AVX2": {
        "gptq": "478360da945e3fc39c2594338f7849e95b8ddb33818135e12fbdafaca4ac3a4e",
        "awq": "bfacead88bcfa93a847f913b6c2f449460ba8ab17b4598e1a5270d4ba817a2aa",
    },
}


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_cpu_quantization_gives_the_same_bytes_as_before_the_device_choice(
    method: str, tiny_model: LoadedModel
) -> None:
    kernels = torch.backends.cpu.get_cpu_capability()
    if kernels not in BEFORE:
        pytest.skip(f"no digest of the pre-device code recorded for torch's {kernels} kernels")
    plan = with_calibration(preset("int4", method=method, block=32), Calibration(samples=8, seq_len=64))
    model = copy.deepcopy(tiny_model.model)
    weights, _ = quantize_model(model, plan, tiny_model.calibration(plan), device=CPU)
    h = hashlib.sha256()
    for name in sorted(weights):
        q = weights[name]
        for t in (q.codes, q.scale, q.zero):
            h.update(t.contiguous().numpy().tobytes())
    for _, p in sorted(model.state_dict().items()):
        h.update(p.contiguous().numpy().tobytes())
    assert h.hexdigest() == BEFORE[kernels][method]
