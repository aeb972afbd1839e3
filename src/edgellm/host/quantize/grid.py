"""MNN's integer weight grid: asymmetric per block, codes 0..2^b-1, ``[zero, scale]`` pairs.

MNN dequantizes a code ``u`` as ``(u - 2^(b-1)) * scale + zero`` where, for a block with
minimum ``min``, ``zero = min + 2^(b-1) * scale``. Every algorithm here produces a
:class:`QuantizedWeight` on exactly this grid so the exporter can carry the integers through.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class QuantizedWeight:
    """Integer codes and per-block parameters of one linear, in MNN's convention."""

    codes: torch.Tensor  # [oc, ic] uint8, 0..2^bits-1
    scale: torch.Tensor  # [oc, n_blocks] float32
    zero: torch.Tensor  # [oc, n_blocks] float32
    bits: int
    block: int  # block size actually used (ic for per-channel)

    @property
    def offset(self) -> int:
        """The code that maps to ``zero`` (2^(bits-1))."""
        return 1 << (self.bits - 1)

    @property
    def plan_block(self) -> int:
        """The block as a plan (and llmexport) spells it: 0 when one block spans the row (per channel)."""
        return 0 if self.block == self.codes.shape[1] else self.block

    def rows(self, part: slice | None) -> QuantizedWeight:
        """The weight of output rows ``part`` (None: all): rows are quantized independently, so exact."""
        if part is None:
            return self
        return QuantizedWeight(self.codes[part], self.scale[part], self.zero[part], self.bits, self.block)

    def dequantize(self) -> torch.Tensor:
        """The float32 weights MNN computes with: ``(u - offset) * scale + zero``."""
        oc, ic = self.codes.shape
        u = self.codes.to(torch.float32).reshape(oc, ic // self.block, self.block)  # [oc, nb, bs]
        w = (u - float(self.offset)) * self.scale[..., None] + self.zero[..., None]
        return w.reshape(oc, ic)

    def n_bytes(self) -> int:
        """Bytes this weight occupies in the MNN weight file (codes + float pairs)."""
        oc, ic = self.codes.shape
        return (oc * ic * self.bits + 7) // 8 + self.scale.numel() * 8


def block_size(ic: int, block: int) -> int:
    """Resolve ``block`` (0 = per channel) against an input width, refusing one that doesn't divide."""
    size = ic if block == 0 else block
    if ic % size != 0:
        raise ValueError(f"block {block} does not divide input width {ic}")
    return size


def grid_params(
    w: torch.Tensor, bits: int, clip: torch.Tensor | float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row ``(lo, scale)`` of an asymmetric grid over ``w`` [..., bs], range shrunk by ``clip``."""
    levels = (1 << bits) - 1
    lo = w.amin(dim=-1) * clip
    hi = w.amax(dim=-1) * clip
    scale = (hi - lo) / levels
    # Why: a constant block has max == min; any positive scale represents it exactly.
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return lo, scale


def quantize_to_grid(
    w: torch.Tensor, lo: torch.Tensor, scale: torch.Tensor, bits: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes of ``w`` [..., bs] on the grid ``(lo, scale)`` [...] and their dequantized values."""
    levels = (1 << bits) - 1
    offset = 1 << (bits - 1)
    u = torch.clamp(torch.round((w - lo[..., None]) / scale[..., None]), 0, levels)
    zero = lo + offset * scale
    deq = (u - offset) * scale[..., None] + zero[..., None]
    return u, deq


def rtn_quantize(w: torch.Tensor, bits: int, block: int, clip_search: bool = False) -> QuantizedWeight:
    """Round-to-nearest of ``w`` [oc, ic]; with ``clip_search`` pick the per-block range by MSE."""
    oc, ic = w.shape
    bs = block_size(ic, block)
    x = w.detach().to(torch.float32).reshape(oc, ic // bs, bs)  # [oc, nb, bs]
    lo, scale = grid_params(x, bits)
    if clip_search:
        best = torch.full(lo.shape, float("inf"))
        for ratio in torch.linspace(1.0, 0.75, 11).tolist():
            cand_lo, cand_scale = grid_params(x, bits, ratio)
            _, deq = quantize_to_grid(x, cand_lo, cand_scale, bits)
            err = (deq - x).pow(2).sum(dim=-1)
            better = err < best
            best = torch.where(better, err, best)
            lo = torch.where(better, cand_lo, lo)
            scale = torch.where(better, cand_scale, scale)
    u, _ = quantize_to_grid(x, lo, scale, bits)
    offset = 1 << (bits - 1)
    q = QuantizedWeight(
        codes=u.reshape(oc, ic).to(torch.uint8),
        scale=scale.contiguous(),
        zero=(lo + offset * scale).contiguous(),
        bits=bits,
        block=bs,
    )
    check_finite(q.scale, "scale")
    return q


def check_finite(t: torch.Tensor, what: str) -> None:
    """Numerical guard: refuse NaN/inf right after a numeric step."""
    if not torch.isfinite(t).all():
        raise FloatingPointError(f"non-finite values in {what}")
