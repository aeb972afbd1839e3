"""RTN, GPTQ and AWQ on random layers, checked against plain references."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgellm.host.quantize.awq import AwqSearch, apply_scale
from edgellm.host.quantize.gptq import GPTQ
from edgellm.host.quantize.grid import rtn_quantize


def _correlated_inputs(n: int, ic: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(ic, ic, generator=g) / ic**0.5
    scale = torch.linspace(0.1, 3.0, ic)  # a few salient channels, like real activations
    out: torch.Tensor = (torch.randn(n, ic, generator=g) @ mix) * scale  # [n, ic]
    return out


def test_rtn_matches_mnn_formula() -> None:
    w = torch.randn(16, 64)
    q = rtn_quantize(w, 4, 32)
    assert q.codes.dtype == torch.uint8 and int(q.codes.max()) <= 15
    # MNN: zero = min + 8*scale, dequant (c - 8)*scale + zero; min and max are on the grid.
    blocks = w.reshape(16, 2, 32)
    assert torch.allclose(q.zero, blocks.amin(-1) + 8 * q.scale)
    assert torch.allclose(q.dequantize().reshape(16, 2, 32).amax(-1), blocks.amax(-1), atol=1e-6)
    assert (q.dequantize() - w).abs().max() <= q.scale.max() / 2 + 1e-6


def test_clip_search_never_worse_than_minmax() -> None:
    w = torch.randn(32, 128)
    plain = (rtn_quantize(w, 4, 64).dequantize() - w).pow(2).sum()
    clipped = (rtn_quantize(w, 4, 64, clip_search=True).dequantize() - w).pow(2).sum()
    assert clipped <= plain


@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_beats_rtn_on_output_error(act_order: bool) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(128, 96, bias=False)
    x = _correlated_inputs(2048, 128)
    ref = x @ layer.weight.detach().t()
    gptq = GPTQ(layer)
    gptq.add_batch(x[:1024])
    gptq.add_batch(x[1024:])
    q = gptq.quantize(4, 32, act_order=act_order)
    gptq.free()
    err_gptq = (x @ q.dequantize().t() - ref).pow(2).mean()
    err_rtn = (x @ rtn_quantize(layer.weight, 4, 32).dequantize().t() - ref).pow(2).mean()
    assert err_gptq < 0.8 * err_rtn
    assert q.codes.shape == (96, 128) and q.scale.shape == (96, 4)


def test_gptqs_column_sweep_runs_on_one_thread_and_restores_the_count() -> None:
    """The sweep pins one thread and gives the count back, also when the block raises.

    That its codes are the same bits as before is what tests/quantize/test_device.py's pinned
    digests check.
    """
    from edgellm.host.quantize.gptq import one_thread

    before = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), one_thread():
        raise RuntimeError("a failing sweep")
    assert torch.get_num_threads() == before


def test_awq_search_returns_scales_that_help_and_preserve_fp() -> None:
    torch.manual_seed(0)
    norm_weight = nn.Parameter(torch.ones(128))
    prev = nn.Module()
    prev.weight = norm_weight
    lins = [nn.Linear(128, 64, bias=False), nn.Linear(128, 32, bias=False)]
    x = _correlated_inputs(1024, 128)
    search = AwqSearch(lins)
    search.add_batch(x)
    scales, ratio, loss, base = search.search(4, 32)
    search.free()
    assert scales.shape == (128,) and torch.isfinite(scales).all()
    assert 0.0 <= ratio < 1.0 and loss <= base
    before = [x @ lin.weight.detach().t() for lin in lins]
    apply_scale(prev, lins, scales)
    after = [(x / scales) @ lin.weight.detach().t() for lin in lins]  # prev output divided by s
    for b, a in zip(before, after, strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
