"""The gate's torch reference, layer by layer: final hidden states of every gate sequence, logits by rows.

The conversion gate compares MNN's logits with a torch model's over EVAL_TOKENS positions of a
vocabulary of up to 152k tokens: a whole [T, V] float32 array is 0.5-0.6 GB at Llama-3's or Qwen's
vocabulary, and the gate held four of them. Here the torch side keeps only what the logits are
computed from:

- ``final_hidden`` runs every gate sequence through the decoder with the quantizer's own layer
  walker (``quantize.apply.run_layer``, the adapter's RoPE and masks): each decoder layer is entered
  once (a streamed model reads it from the shards then, and frees it after) and all sequences pass
  through it, so no more than one layer is ever in memory; the result is [T, H] per sequence.
- ``HeadLogits.rows(a, b)`` applies the output head (lm_head, then Gemma's final soft-cap) to
  positions a..b only: [b - a, V]. The quantized reference's head dequantizes its integers by
  vocabulary rows (``VOCAB_ROWS``), so not even the fp32 lm_head is held (1 GB at Llama-3.2-1B);
  during a build it reads them from the artifact's weight file (``PendingHead``), so not even the
  integers are held.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from edgellm.host.quantize.adapter import adapter_for
from edgellm.host.quantize.apply import Materialize, run_layer
from edgellm.host.quantize.grid import QuantizedWeight

ROWS = 128  # positions per reference chunk: [128, V] float32 is 66 MB at 128,256 tokens
# lm_head rows dequantized at a time: the codes as float32, the weights and a temporary, each
# [4096, H] float32 (34 MB at H = 2,048).
VOCAB_ROWS = 4096
Head = Callable[[torch.Tensor], torch.Tensor]  # [C, H] -> [C, V]
RowsOf = Callable[[slice], QuantizedWeight]  # lm_head's integers of vocabulary rows ``part``
WeightOf = Callable[[slice], torch.Tensor]  # lm_head's float32 weight rows ``part``: [rows, H]


class ChunkedLogits(Protocol):
    """Logits [positions, vocab] that are handed out by rows, never necessarily held whole."""

    @property
    def positions(self) -> int: ...

    @property
    def vocab(self) -> int: ...

    def rows(self, start: int, stop: int) -> np.ndarray: ...


@dataclass(frozen=True)
class WholeLogits:
    """Logits a caller holds already, [T, V]."""

    logits: np.ndarray

    @property
    def positions(self) -> int:
        """T."""
        return int(self.logits.shape[0])

    @property
    def vocab(self) -> int:
        """V."""
        return int(self.logits.shape[-1])

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Positions start..stop: [stop - start, V] (a view)."""
        return self.logits[start:stop]


@dataclass(frozen=True)
class HeadLogits:
    """Final hidden states [T, H] and the head that turns them into logits, a chunk at a time."""

    hidden: torch.Tensor  # [T, H]
    head: Head
    vocab: int

    @property
    def positions(self) -> int:
        """T."""
        return int(self.hidden.shape[0])

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Positions start..stop: [stop - start, V] float32."""
        with torch.inference_mode():
            out: np.ndarray = self.head(self.hidden[start:stop]).float().numpy()
        return out


def chunks(logits: ChunkedLogits, rows: int = ROWS) -> Iterator[tuple[int, np.ndarray]]:
    """(first position, [C, V]) over every position, ``rows`` at a time."""
    for start in range(0, logits.positions, rows):
        yield start, logits.rows(start, min(start + rows, logits.positions))


@torch.no_grad()
def final_hidden(
    model: nn.Module, sequences: Sequence[list[int]], materialize: Materialize | None = None
) -> list[torch.Tensor]:
    """Each sequence's final-norm hidden states [T_i, H], every decoder layer entered once for all.

    ``materialize(i)`` holds layer i in memory meanwhile (a streamed model's ``LayerStream.layer``).
    """
    enter = materialize or (lambda _i: nullcontext())
    adapter = adapter_for(model)
    hidden = [adapter.embed(model, torch.tensor([ids])) for ids in sequences]  # each [1, T_i, H]
    for index in range(len(adapter.layers(model))):
        with enter(index):
            hidden = [run_layer(adapter, model, index, h) for h in hidden]
    return [adapter.final_norm(model, h)[0] for h in hidden]


def model_head(model: Any) -> Head:
    """The model's own output head: its lm_head module, then the final soft-cap where the config has one."""
    lm_head: nn.Module = model.get_output_embeddings()
    return lambda h: softcap(lm_head(h), model.config)


def quantized_head(q: QuantizedWeight, config: Any, bias: torch.Tensor | None = None) -> Head:
    """The head of a model whose lm_head holds ``q``'s integers, dequantized by vocabulary rows."""
    return rows_head(q.rows, int(q.codes.shape[0]), config, bias)


def rows_head(rows_of: RowsOf, vocab: int, config: Any, bias: torch.Tensor | None = None) -> Head:
    """The head whose lm_head integers ``rows_of(part)`` gives by vocabulary rows (memory or a file)."""
    return weight_rows_head(lambda part: rows_of(part).dequantize(), vocab, config, bias)


def weight_rows_head(weight_of: WeightOf, vocab: int, config: Any, bias: torch.Tensor | None = None) -> Head:
    """The head whose lm_head weight rows [rows, H] float32 ``weight_of(part)`` gives, by vocabulary rows."""

    def head(h: torch.Tensor) -> torch.Tensor:
        out = torch.empty(h.shape[0], vocab)  # [C, V]
        for a in range(0, vocab, VOCAB_ROWS):
            part = slice(a, min(a + VOCAB_ROWS, vocab))
            out[:, part] = functional.linear(h, weight_of(part), None if bias is None else bias[part])
        return softcap(out, config)

    return head


@dataclass(frozen=True)
class PendingHead:
    """The reference's final hidden states [T, H], waiting for the artifact's lm_head integers.

    Why: the gate's quantized reference needs lm_head's integers, which the artifact holds
    exactly once the export has written them (its round-trip check proves it). Reading them from
    the weight file by rows, instead of keeping them in memory through the gate, frees
    vocabulary × hidden bytes while MNN holds the model: 0.7 GB at Gemma-2's 256,000 tokens
    (docs/quantization.md, "Host memory while converting").
    """

    hidden: torch.Tensor
    config: Any
    bias: torch.Tensor | None

    def logits(self, rows_of: RowsOf, vocab: int) -> HeadLogits:
        """The reference's logits, by rows, through the head ``rows_of`` gives."""
        return HeadLogits(self.hidden, rows_head(rows_of, vocab, self.config, self.bias), vocab)


def softcap(logits: torch.Tensor, config: Any) -> torch.Tensor:
    """Gemma-2/3's final soft-cap ``cap · tanh(x / cap)`` (as transformers applies it); else ``logits``."""
    cap = getattr(config, "final_logit_softcapping", None)
    if cap is None:
        return logits
    capped: torch.Tensor = torch.tanh(logits / cap) * cap
    return capped


def reference_logits(
    model: Any, ids: list[int], materialize: Materialize | None = None, head: Head | None = None
) -> HeadLogits:
    """The torch model's logits of ``ids`` as one window, by rows (``head``: the model's own by default)."""
    hidden = final_hidden(model, [ids], materialize)[0]
    return HeadLogits(hidden, head or model_head(model), int(model.config.vocab_size))


def whole(logits: ChunkedLogits) -> np.ndarray:
    """Every row at once, [T, V] (tests and small models only)."""
    return (
        np.concatenate([rows for _, rows in chunks(logits)])
        if logits.positions
        else np.empty((0, logits.vocab))
    )
