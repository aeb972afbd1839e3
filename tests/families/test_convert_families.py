"""Every family converts: a tiny random-weight checkpoint -> 8-bit RTN artifact that passes the gate.

The gate (convert/verify.py) scores the artifact through both MNN paths against the torch
quantized model (fidelity: KL by position bucket, top-1 where torch is confident) and torch fp
(perplexity; not judged on these untrained checkpoints) and raises ConversionCheckFailed out of
tolerance. tests/families/test_end_to_end.py takes each family on to GPTQ, the daemon and the gateway.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgellm.host.convert.pipeline import convert
from tests.tiny_families import FAMILIES, build_tiny, tiny_config

# One export takes 35-110 s on the 2-core dev box (docs/models.md). The default run takes phi3
# end to end at the default INT4 preset (test_end_to_end.py); INT8 runs under -m slow.
CASES = [pytest.param(f, marks=pytest.mark.slow) for f in sorted(FAMILIES)]


@pytest.mark.parametrize("family", CASES)
def test_a_tiny_checkpoint_of_each_family_converts_at_8_bits_and_passes_the_gate(
    family: str, tmp_path: Path
) -> None:
    hf = build_tiny(family, tmp_path / "hf")
    start = time.perf_counter()
    manifest = convert(str(hf), tmp_path / "art", bits=8, block=32)
    seconds = time.perf_counter() - start
    checks = manifest.checks
    assert checks is not None
    print(f"{family}: convert {seconds:.1f} s, {checks}")
    assert manifest.model.architecture == tiny_config(family).model_type
    assert checks.fidelity_decode is not None and checks.fidelity_prefill is not None  # gated
