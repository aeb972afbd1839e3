"""Where quantization computes: ``--device auto|cpu|cuda``, chosen in one place and logged.

``auto`` takes CUDA when torch sees a GPU, else the CPU. GPTQ/AWQ move one decoder layer (its
weights, the calibration activations, the Hessians) to the device at a time, so GPU memory stays
bounded by a layer; the integers come back to the host, in the same format either way.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Literal

import structlog
import torch
from torch import nn

from edgellm.common.errors import InvalidArgument
from edgellm.host.quantize.grid import QuantizedWeight

log = structlog.get_logger(__name__)

DeviceChoice = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[DeviceChoice, ...] = ("auto", "cpu", "cuda")
CPU = torch.device("cpu")


def choose_device(
    requested: str = "auto",
    *,
    cuda_available: Callable[[], bool] = torch.cuda.is_available,
    name_of: Callable[[torch.device], str] | None = None,
) -> torch.device:
    """The device for ``requested``; InvalidArgument for an unknown name or CUDA that torch cannot see."""
    if requested not in DEVICES:
        raise InvalidArgument(f"--device {requested!r}: choose one of {', '.join(DEVICES)}")
    cuda = cuda_available()
    if requested == "cuda" and not cuda:
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise InvalidArgument(
            f"--device cuda: torch {torch.__version__} ({build}) sees no CUDA GPU; "
            "use --device cpu, or --device auto to take a GPU only when there is one"
        )
    device = torch.device("cuda") if requested == "cuda" or (requested == "auto" and cuda) else CPU
    name = (name_of or device_name)(device)
    log.info("quantize_device", requested=requested, device=str(device), name=name)
    return device


def device(name: str) -> torch.device:
    """A resolved device name (``LoadedModel.device``) as a torch device."""
    return torch.device(name)


def device_name(device: torch.device) -> str:
    """The GPU's name (``NVIDIA H200``) or the host CPU's."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    return platform.processor() or platform.machine()


@contextmanager
def layer_on(device: torch.device, *modules: nn.Module) -> Iterator[None]:
    """Run the body with ``modules`` on ``device`` and tensors created there; back on the CPU after.

    On the CPU nothing moves and nothing is set: CPU results stay bit for bit what they were.
    """
    if device.type == "cpu":
        yield
        return
    for m in modules:
        m.to(device)
    try:
        with device:  # torch.zeros/eye/arange in GPTQ, AWQ and the grid allocate on the device
            yield
    finally:
        for m in modules:
            m.to(CPU)


def to_host(q: QuantizedWeight) -> QuantizedWeight:
    """``q`` with its tensors on the CPU (the exporter and carry_weights read them there)."""
    if q.codes.device == CPU:
        return q
    return replace(q, codes=q.codes.cpu(), scale=q.scale.cpu(), zero=q.zero.cpu())
