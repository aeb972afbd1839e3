"""`edgellm quantize`'s torch columns of a streamed model: a layer walk per column, heads by vocabulary rows.

The evaluation scores fp torch, quantized torch and MNN on the same windows. With whole-model
forwards that needed the fp32 model and a quantized copy of it at once (6.4x the fp16 checkpoint at
Llama-3.2-1B, bench/results/scale-2026-12-06-gptq-llama-3.2-1b.json). A streamed model quantized in
place (``build_artifact(consume=True)``) serves both torch columns instead, as the conversion gate's
reference does (convert/reference.py):

- ``final_hidden`` walks every window through each decoder layer once, before quantizing (the fp
  column) and after (the quantized one: the stream then loads the integers); what is kept is [T, H]
  per window.
- The fp head reads lm_head's (or the tied embedding's) rows from the checkpoint's safetensors, as
  RTN overwrites the resident lm_head in place; the quantized head reads lm_head's integers from the
  artifact once the export has written them. Neither holds the [V, H] matrix in fp32.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgellm.host.builder.loaded import LoadedModel
from edgellm.host.convert.reference import Head, final_hidden, rows_head, weight_rows_head
from edgellm.host.evaluate.scorers import ALL
from edgellm.host.evaluate.windows import windows
from edgellm.host.quantize.adapter import DecoderAdapter
from edgellm.host.quantize.export import ExportReport

Key = tuple[int, ...]


@dataclass
class HiddenScorer:
    """A Scorer for windows whose final hidden states are computed already: ids [T] -> head(hidden) [T, V]."""

    hidden: dict[Key, torch.Tensor]  # window ids -> [T, H]
    head: Head | None = None  # set once its weights can be read (the quantized head: after the export)

    def __call__(self, ids: list[int], rows: slice = ALL) -> np.ndarray:
        """Logits [T, V] (positions ``rows``: only those go through the head) of a window walked already."""
        if self.head is None:
            raise RuntimeError("the head of this column is not formed yet (before the export)")
        with torch.inference_mode():
            out: np.ndarray = self.head(self.hidden[tuple(ids)][rows]).float().numpy()
        return out


@dataclass
class StreamedColumns:
    """The evaluation's fp and quantized torch columns of a streamed model quantized in place."""

    windows: list[list[int]]
    fp: HiddenScorer
    bias: torch.Tensor | None  # lm_head's bias (not quantized): both heads add it
    config: Any  # the model's config (Gemma's final soft-cap)
    quantized: HiddenScorer | None = None

    @classmethod
    def before_quantizing(cls, loaded: LoadedModel) -> StreamedColumns:
        """Walk the evaluation windows through the fp model; the fp head reads the checkpoint's rows."""
        stream = loaded.stream
        if stream is None:
            raise ValueError("streamed evaluation needs a streamed model (LoadedModel.open streamed=True)")
        cfg = loaded.evaluation
        ids = loaded.eval_ids
        chunks = [ids[w.begin : w.end] for w in windows(len(ids), cfg.context, cfg.stride)]
        model = loaded.model
        lm_head = model.get_output_embeddings()
        bias = None if lm_head.bias is None else lm_head.bias.detach().clone()
        name = next(n for n, p in model.named_parameters() if p is lm_head.weight)  # tied: the stored name
        fp = _walk(model, chunks, stream.layer)
        fp.head = checkpoint_head(stream.files[name], name, model.config, bias)
        return cls(chunks, fp, bias, model.config)

    def after_quantizing(self, loaded: LoadedModel) -> None:
        """Walk the windows again through the model quantized in place (its head comes after the export)."""
        assert loaded.stream is not None
        self.quantized = _walk(loaded.model, self.windows, loaded.stream.layer)

    def after_export(self, report: ExportReport, adapter: DecoderAdapter) -> None:
        """Form the quantized head from the artifact's lm_head integers, read by vocabulary rows."""
        assert self.quantized is not None
        rows_of, vocab = report.lm_head_rows(adapter)
        self.quantized.head = rows_head(rows_of, vocab, self.config, self.bias)

    def quantized_column(self) -> HiddenScorer:
        """The quantized torch column (walked and headed: after ``after_export``)."""
        if self.quantized is None:
            raise RuntimeError("the quantized column is walked after quantizing")
        return self.quantized


def _walk(model: Any, chunks: list[list[int]], layer: Any) -> HiddenScorer:
    return HiddenScorer(dict(zip(map(tuple, chunks), final_hidden(model, chunks, layer), strict=True)))


def checkpoint_head(shard: Path, name: str, config: Any, bias: torch.Tensor | None) -> Head:
    """The fp head reading tensor ``name``'s rows from ``shard`` (cast to float32, as the model loads it)."""

    def head(h: torch.Tensor) -> torch.Tensor:  # h: [C, H] -> [C, V]
        with _rows(shard, name) as (vocab, weight_of):
            return weight_rows_head(weight_of, vocab, config, bias)(h)

    return head


@contextmanager
def _rows(shard: Path, name: str) -> Iterator[tuple[int, Any]]:
    """(rows, part -> float32 rows) of one checkpoint tensor, its shard open meanwhile."""
    from safetensors import safe_open

    with safe_open(str(shard), framework="pt") as f:
        tensor = f.get_slice(name)
        yield int(tensor.get_shape()[0]), lambda part: tensor[part].to(torch.float32)
