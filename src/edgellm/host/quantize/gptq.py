"""GPTQ (Frantar et al. 2022) on MNN's asymmetric block grid, after IST-DASLab/gptq.

Lifecycle: ``add_batch`` (accumulate the Hessian from a linear's inputs) -> ``quantize``
(column-by-column rounding with error feedback) -> ``free``. Model-agnostic: it sees one
``nn.Linear`` and the activations fed to it, nothing else.
"""

from __future__ import annotations

import math

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
        self, bits: int, block: int, percdamp: float = 0.01, lazy_block: int = 128, act_order: bool = False
    ) -> QuantizedWeight:
        """Quantize the layer's weight; groups get their grid from the error-updated weights.

        With ``act_order`` columns go in order of decreasing Hessian diagonal and every block keeps
        a static grid computed up front (GPTQ's ``static_groups``), so blocks stay contiguous.
        """
        assert self.hessian is not None, "quantize after free"
        if act_order:
            return self._quantize_act_order(bits, block, percdamp, lazy_block)
        w = self.layer.weight.detach().to(torch.float32).clone()  # [oc, ic]
        oc, ic = w.shape
        group = block_size(ic, block)
        h = self.hessian.clone()
        dead = torch.diag(h) == 0
        h[dead, dead] = 1
        w[:, dead] = 0
        damp = percdamp * torch.mean(torch.diag(h))
        h += torch.eye(ic) * damp
        # Upper Cholesky factor of H^-1, as in the reference implementation.
        hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
        check_finite(hinv, "GPTQ inverse Hessian")

        codes = torch.zeros(oc, ic, dtype=torch.uint8)
        n_blocks = ic // group
        scale = torch.zeros(oc, n_blocks)
        zero = torch.zeros(oc, n_blocks)
        offset = 1 << (bits - 1)
        levels = (1 << bits) - 1
        lo = torch.zeros(oc)
        sc = torch.ones(oc)
        # Lazy batches hold whole groups so a group's grid sees its updated weights.
        lazy = max(group, (lazy_block // group) * group)
        for i1 in range(0, ic, lazy):
            i2 = min(i1 + lazy, ic)
            w1 = w[:, i1:i2].clone()
            err1 = torch.zeros_like(w1)
            hinv1 = hinv[i1:i2, i1:i2]
            for i in range(i2 - i1):
                col = i1 + i
                if col % group == 0:
                    # Grid for this block: MSE-searched range of the current (updated) weights.
                    g = rtn_quantize(w1[:, i : i + group], bits, 0, clip_search=True)
                    sc = g.scale[:, 0]
                    lo = g.zero[:, 0] - offset * sc
                    scale[:, col // group] = sc
                    zero[:, col // group] = g.zero[:, 0]
                wc = w1[:, i]
                u = torch.clamp(torch.round((wc - lo) / sc), 0, levels)
                q = (u - offset) * sc + (lo + offset * sc)
                codes[:, col] = u.to(torch.uint8)
                d = hinv1[i, i]
                e = (wc - q) / d
                w1[:, i:] -= e.unsqueeze(1) @ hinv1[i, i:].unsqueeze(0)
                err1[:, i] = e
            w[:, i2:] -= err1 @ hinv[i1:i2, i2:]
        check_finite(scale, "GPTQ scales")
        return QuantizedWeight(codes=codes, scale=scale, zero=zero, bits=bits, block=group)

    def _quantize_act_order(self, bits: int, block: int, percdamp: float, lazy_block: int) -> QuantizedWeight:
        assert self.hessian is not None
        w = self.layer.weight.detach().to(torch.float32).clone()  # [oc, ic]
        oc, ic = w.shape
        group = block_size(ic, block)
        h = self.hessian.clone()
        dead = torch.diag(h) == 0
        h[dead, dead] = 1
        w[:, dead] = 0
        grid = rtn_quantize(w, bits, group, clip_search=True)  # static per-block grids
        offset = 1 << (bits - 1)
        levels = (1 << bits) - 1
        lo_all = grid.zero - offset * grid.scale  # [oc, nb]
        perm = torch.argsort(torch.diag(h), descending=True)
        w = w[:, perm]
        h = h[perm][:, perm]
        h += torch.eye(ic) * (percdamp * torch.mean(torch.diag(h)))
        hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
        check_finite(hinv, "GPTQ inverse Hessian")
        codes = torch.zeros(oc, ic, dtype=torch.uint8)
        for i1 in range(0, ic, lazy_block):
            i2 = min(i1 + lazy_block, ic)
            w1 = w[:, i1:i2].clone()
            err1 = torch.zeros_like(w1)
            hinv1 = hinv[i1:i2, i1:i2]
            for i in range(i2 - i1):
                col = int(perm[i1 + i])
                sc, lo = grid.scale[:, col // group], lo_all[:, col // group]
                wc = w1[:, i]
                u = torch.clamp(torch.round((wc - lo) / sc), 0, levels)
                q = u * sc + lo
                codes[:, col] = u.to(torch.uint8)
                e = (wc - q) / hinv1[i, i]
                w1[:, i:] -= e.unsqueeze(1) @ hinv1[i, i:].unsqueeze(0)
                err1[:, i] = e
            w[:, i2:] -= err1 @ hinv[i1:i2, i2:]
        return QuantizedWeight(codes=codes, scale=grid.scale, zero=grid.zero, bits=bits, block=group)

    def free(self) -> None:
        """Drop the Hessian."""
        self.hessian = None
