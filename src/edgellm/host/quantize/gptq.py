"""GPTQ (Frantar et al. 2022) on MNN's asymmetric block grid, after IST-DASLab/gptq.

Lifecycle: ``add_batch`` (accumulate the Hessian from a linear's inputs) -> ``quantize``
(column-by-column rounding with error feedback) -> ``free``. Model-agnostic: it sees one
``nn.Linear`` and the activations fed to it, nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from edgellm.host.quantize.grid import QuantizedWeight, block_size, check_finite, rtn_quantize


class GPTQ:
    """Second-order weight rounding for one linear layer."""

    def __init__(self, layer: nn.Linear) -> None:
        self.layer = layer
        self.columns = layer.in_features
        self.hessian: torch.Tensor | None = torch.zeros(self.columns, self.columns, dtype=torch.float32)
        self.n_samples = 0

    def add_batch(self, inp: torch.Tensor) -> None:
        """Accumulate ``H = 2/n · Σ xᵀx`` from inputs ``inp`` [..., ic]."""
        assert self.hessian is not None, "add_batch after free"
        x = inp.detach().reshape(-1, self.columns).to(torch.float32)  # [n, ic]
        n = x.shape[0]
        self.hessian *= self.n_samples / (self.n_samples + n)
        self.n_samples += n
        x = x * math.sqrt(2.0 / self.n_samples)
        self.hessian += x.t() @ x

    def quantize(
        self,
        bits: int,
        block: int,
        percdamp: float = 0.01,
        lazy_block: int = 128,
        act_order: bool = False,
        clip_search: bool = True,
    ) -> QuantizedWeight:
        """Quantize the layer's weight on MNN's block grid with GPTQ's error feedback.

        Without ``act_order`` columns go left to right and each block gets its grid from the
        error-updated weights when the sweep reaches it. With ``act_order`` columns go in order of
        decreasing Hessian diagonal and every block keeps a static grid computed up front from the
        original weights (GPTQ's ``static_groups``), so blocks stay contiguous for MNN.
        ``clip_search`` picks each block's range by weight MSE; without it the range is min..max.
        """
        w = self.layer.weight.detach().to(torch.float32).clone()  # [oc, ic]
        oc, ic = w.shape
        group = block_size(ic, block)
        h = self._dead_columns_fixed(w)
        n_blocks = ic // group
        scale = torch.zeros(oc, n_blocks)
        zero = torch.zeros(oc, n_blocks)
        if act_order:
            static = rtn_quantize(w, bits, group, clip_search=clip_search)
            scale, zero = static.scale, static.zero
            order = torch.argsort(torch.diag(h), descending=True)
        else:
            order = torch.arange(ic)

        def grid(col: int, current: torch.Tensor) -> None:
            """Set block ``col // group``'s grid (dynamic mode: from ``current`` [oc, group])."""
            g = rtn_quantize(current, bits, 0, clip_search=clip_search)
            scale[:, col // group] = g.scale[:, 0]
            zero[:, col // group] = g.zero[:, 0]

        codes = self._sweep(
            w, h, order, bits, group, None if act_order else grid, scale, zero, percdamp, lazy_block
        )
        check_finite(scale, "GPTQ scales")
        return QuantizedWeight(codes=codes, scale=scale, zero=zero, bits=bits, block=group)

    def _dead_columns_fixed(self, w: torch.Tensor) -> torch.Tensor:
        """The Hessian with never-active input columns made harmless (their weights zeroed in ``w``)."""
        assert self.hessian is not None, "quantize after free"
        h = self.hessian.clone()
        dead = torch.diag(h) == 0
        h[dead, dead] = 1
        w[:, dead] = 0
        return h

    @staticmethod
    def _sweep(
        w: torch.Tensor,
        h: torch.Tensor,
        order: torch.Tensor,
        bits: int,
        group: int,
        grid: Callable[[int, torch.Tensor], None] | None,
        scale: torch.Tensor,
        zero: torch.Tensor,
        percdamp: float,
        lazy_block: int,
    ) -> torch.Tensor:
        """GPTQ's column sweep in ``order``; ``grid(col, weights)`` sets a block's grid on reaching it.

        Rounding and error feedback use MNN's own dequantization ``(u - offset)·scale + zero``.
        """
        oc, ic = w.shape
        w = w[:, order]
        h = h[order][:, order]
        h += torch.eye(ic) * (percdamp * torch.mean(torch.diag(h)))
        # Upper Cholesky factor of H^-1, as in the reference implementation.
        hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
        check_finite(hinv, "GPTQ inverse Hessian")
        codes = torch.zeros(oc, ic, dtype=torch.uint8)
        offset = 1 << (bits - 1)
        levels = (1 << bits) - 1
        # Lazy batches hold whole groups so a dynamic grid sees its block's updated weights.
        lazy = max(group, (lazy_block // group) * group)
        for i1 in range(0, ic, lazy):
            i2 = min(i1 + lazy, ic)
            w1 = w[:, i1:i2].clone()
            err1 = torch.zeros_like(w1)
            hinv1 = hinv[i1:i2, i1:i2]
            with one_thread():
                for i in range(i2 - i1):
                    col = int(order[i1 + i])
                    if grid is not None and col % group == 0:
                        grid(col, w1[:, i : i + group])
                    sc, zr = scale[:, col // group], zero[:, col // group]
                    lo = zr - offset * sc
                    wc = w1[:, i]
                    u = torch.clamp(torch.round((wc - lo) / sc), 0, levels)
                    codes[:, col] = u.to(torch.uint8)
                    e = (wc - ((u - offset) * sc + zr)) / hinv1[i, i]
                    w1[:, i:] -= e.unsqueeze(1) @ hinv1[i, i:].unsqueeze(0)
                    err1[:, i] = e
            w[:, i2:] -= err1 @ hinv[i1:i2, i2:]  # the one large product: all threads
        return codes

    def free(self) -> None:
        """Drop the Hessian."""
        self.hessian = None


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch ops on one intra-op thread for the block (the previous count is restored).

    Why: the column sweep issues ~10 small ops per column on [oc] vectors and one rank-1 update;
    split over threads each op ends at a barrier, and on a busy 2-core host a barrier waits for a
    descheduled thread (docs/quantization.md, "GPTQ's column sweep on one thread"). The ops
    are elementwise or outer products, so the codes are the same bits on any thread count.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
