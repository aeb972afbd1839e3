"""AWQ (Lin et al. 2023) activation-aware scale search, after mit-han-lab/llm-awq.

Search returns data (:class:`AwqScale` per group) that ``apply_scale`` folds into the model:
linears get ``W·diag(s)`` and the op feeding them gets ``1/s``, so the fp function is unchanged
and the salient input channels land on a finer grid. The scaled weights are then rounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from edgellm.host.quantize.grid import block_size, check_finite, rtn_quantize


@dataclass(frozen=True)
class AwqScale:
    """Search result for one group: per-input-channel scales and the ratio that won."""

    prev: str
    linears: tuple[str, ...]
    scales: torch.Tensor  # [ic]
    ratio: float
    loss: float
    base_loss: float
    # What the fold changed outside the quantized linears, by full name after the fold: a norm's
    # weight, a feeding linear's bias. A streamed build exports these over the checkpoint's.
    folded: Mapping[str, torch.Tensor] = field(default_factory=dict)


def folded_tensors(scales: list[AwqScale]) -> dict[str, torch.Tensor]:
    """What ``scales``' folds left outside the quantized linears, by full name (the last fold's value)."""
    return {name: t for s in scales for name, t in s.folded.items()}


class AwqSearch:
    """Collect one group's inputs (``add_batch``), then ``search`` its scales; ``free`` after."""

    def __init__(self, linears: list[nn.Linear], max_tokens: int = 2048) -> None:
        self.linears = linears
        self.max_tokens = max_tokens
        self.inputs: list[torch.Tensor] = []
        self.abs_sum = torch.zeros(linears[0].in_features)
        self.count = 0

    def add_batch(self, inp: torch.Tensor) -> None:
        """Record the group's input activations ``inp`` [..., ic]."""
        x = inp.detach().reshape(-1, inp.shape[-1]).to(torch.float32)  # [n, ic]
        self.abs_sum += x.abs().sum(dim=0)
        self.count += x.shape[0]
        kept = sum(t.shape[0] for t in self.inputs)
        if kept < self.max_tokens:
            self.inputs.append(x[: self.max_tokens - kept].clone())

    def search(
        self, bits: int, block: int, n_grid: int = 20, duo: bool = False
    ) -> tuple[torch.Tensor, float, float, float]:
        """Grid-search the scales minimising the group's output error.

        Plain: ``s = mean|x|^α``, α = k/n (llm-awq). ``duo``: ``s = mean|x|^α / mean|ŵ|^(1−α)``
        with ``ŵ`` each weight over its block's max magnitude, α = k/(n−2) in [0, 1] plus the
        identity (llmcompressor's ``duo_scaling=True`` grid, same number of points).
        """
        x = torch.cat(self.inputs)  # [n, ic]
        x_mean = self.abs_sum / max(self.count, 1)  # [ic]
        weights = [lin.weight.detach().to(torch.float32) for lin in self.linears]
        w_all = torch.cat(weights)  # [sum oc, ic]
        ref = x @ w_all.t()  # [n, sum oc]
        grid = [(k / n_grid, False) for k in range(n_grid)]
        if duo:
            w_mean = _block_normalised_mean(w_all, block)
            grid = [(0.0, False)] + [(k / (n_grid - 2), True) for k in range(n_grid - 1)]
        best = (float("inf"), 0.0, torch.ones_like(x_mean))
        base = float("nan")
        for k, (ratio, use_w) in enumerate(grid):
            s = x_mean.pow(ratio)
            if use_w:
                s = s / (w_mean.pow(1 - ratio) + 1e-4)
            s = s.clamp(min=1e-4)
            s = s / (s.max() * s.min()).sqrt()
            wq = rtn_quantize(w_all * s, bits, block).dequantize() / s
            loss = float((x @ wq.t() - ref).pow(2).mean())
            if k == 0:
                base = loss
            if loss < best[0]:
                best = (loss, ratio, s)
        check_finite(best[2], "AWQ scales")
        return best[2], best[1], best[0], base

    def free(self) -> None:
        """Drop the cached activations."""
        self.inputs = []


def _block_normalised_mean(w: torch.Tensor, block: int) -> torch.Tensor:
    """Per input channel, the mean over rows of ``|w|`` divided by its block's max ``|w|`` [ic]."""
    oc, ic = w.shape
    bs = block_size(ic, block)
    a = w.abs().reshape(oc, ic // bs, bs)
    return (a / (a.amax(dim=-1, keepdim=True) + 1e-6)).reshape(oc, ic).mean(dim=0)


@torch.no_grad()
def apply_scale(
    prev: nn.Module,
    linears: list[nn.Linear],
    scales: torch.Tensor,
    *,
    rows: tuple[int, int] | None = None,
    norm_offset: float = 0.0,
) -> None:
    """Fold ``scales`` [ic] in: ``prev`` output ÷ s, each linear's input columns × s.

    ``rows``: the [start, end) output rows of a fused ``prev`` that feed ``linears``.
    ``norm_offset``: a norm computing ``x·(c + w)`` (Gemma: c = 1) gets ``w ← (c + w)/s − c``.
    """
    if isinstance(prev, nn.Linear):
        # Only the rows of prev's output that feed the scaled channels.
        start, end = rows or (0, prev.out_features)
        prev.weight[start:end].div_(scales.view(-1, 1).to(prev.weight.dtype))
        if prev.bias is not None:
            prev.bias[start:end].div_(scales.to(prev.bias.dtype))
    else:
        weight = getattr(prev, "weight", None)
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"cannot fold AWQ scales into {type(prev).__name__}")
        if norm_offset:
            weight.copy_((weight + norm_offset) / scales.to(weight.dtype) - norm_offset)
        else:
            weight.div_(scales.to(weight.dtype))
    for lin in linears:
        lin.weight.mul_(scales.view(1, -1).to(lin.weight.dtype))
