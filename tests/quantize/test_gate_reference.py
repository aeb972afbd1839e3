"""The gate's torch reference by layers and by rows (convert/reference.py) equals the whole model's.

Tiny random-weight checkpoints of every family (tests/tiny_families.py): the streamed model's
reference, walked layer by layer with every sequence through each layer in one visit, gives the
fully loaded fp32 model's logits within fp32 tolerance; the quantized head formed from lm_head's
integers gives the quantized model's; and the chunked gate figures (perplexity, fidelity) equal
the whole-array formulas.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from edgellm.host.builder.loaded import load_model, load_tokenizer
from edgellm.host.builder.streamed import open_streamed
from edgellm.host.convert.fidelity import BUCKETS, DELTA, MIN_CLEAR, Tally, bucket_name, fidelity, log_softmax
from edgellm.host.convert.reference import (
    ROWS,
    HeadLogits,
    final_hidden,
    model_head,
    quantized_head,
    reference_logits,
    whole,
)
from edgellm.host.convert.verify import Nll, fp_reference, mnn_scores, perplexity, perplexity_of
from edgellm.host.quantize.apply import quantize_model
from edgellm.host.quantize.plan import preset
from tests.tiny_families import FAMILIES, build_tiny

IDS = list(range(3, 600, 2))  # 299 positions: two reference chunks of 128 and a part
PROMPTS = [[5, 9, 200, 31], [7], list(range(100, 140))]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate-reference")
    return {f: build_tiny(f, root / f) for f in FAMILIES}


def close(got: Any, expected: Any) -> None:
    """Equal within fp32 summation order (logits of std ~5)."""
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def whole_model_logits(model: Any, ids: list[int]) -> np.ndarray:
    """The reference as the gate took it before: one forward of the whole fp32 model, [T, V]."""
    with torch.inference_mode():
        out: np.ndarray = model(torch.tensor([ids])).logits[0].float().numpy()
    return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_streamed_reference_equals_the_whole_model_reading_each_layer_once(
    family: str, checkpoints: dict[str, Path]
) -> None:
    full, _ = load_model(checkpoints[family])
    model, stream = open_streamed(checkpoints[family])
    hidden = final_hidden(model, [IDS, *PROMPTS], stream.layer)
    assert stream.loads == len(stream.layers) and stream.max_live == 1  # one visit per layer, for all
    head = model_head(model)
    got = whole(HeadLogits(hidden[0], head, int(model.config.vocab_size)))
    close(got, whole_model_logits(full, IDS))
    with torch.inference_mode():
        for h, prompt in zip(hidden[1:], PROMPTS, strict=True):
            close(head(h[-1:])[0].numpy(), whole_model_logits(full, prompt)[-1])
        if getattr(model.config, "final_logit_softcapping", None):  # Gemma-2: the cap is seen here
            raw = model.get_output_embeddings()(hidden[0]).numpy()
            assert np.abs(raw - got).max() > 1e-2


@pytest.mark.parametrize("family", ["llama", "gemma2", "phi3"])  # tied; soft-capped; fused linears
def test_the_quantized_head_from_integers_equals_the_quantized_model(
    family: str, checkpoints: dict[str, Path]
) -> None:
    full, _ = load_model(checkpoints[family])
    weights, _ = quantize_model(full, preset("int4", method="rtn", block=32), None)
    ref = HeadLogits(final_hidden(full, [IDS])[0], quantized_head(weights["lm_head"], full.config), 0)
    expected = whole_model_logits(full, IDS)
    close(whole(ref), expected)
    close(whole(reference_logits(full, IDS)), expected)


def test_the_fp_reference_of_a_streamed_model_has_the_whole_models_figures(
    checkpoints: dict[str, Path],
) -> None:
    hf = checkpoints["llama"]
    tokenizer = load_tokenizer(hf)
    full, _ = load_model(hf)
    model, stream = open_streamed(hf)
    streamed = fp_reference(model, tokenizer, 300, stream.layer)
    assert stream.loads == len(stream.layers)  # the eval tokens and 8 prompts in one walk
    loaded = fp_reference(full, tokenizer, 300)
    assert streamed.torch_ppl == pytest.approx(loaded.torch_ppl, rel=1e-5)
    before = perplexity(whole_model_logits(full, loaded.ids), loaded.ids)
    assert streamed.torch_ppl == pytest.approx(before, rel=1e-5)
    assert streamed.next_tokens == loaded.next_tokens


def old_fidelity(ref: np.ndarray, mnn: np.ndarray) -> tuple[np.ndarray, int, float]:
    """KL per position, clear positions, top-1 there: the whole-array formulas the gate used before."""
    p, q = log_softmax(ref), log_softmax(mnn)
    kl = np.maximum((np.exp(p) * (p - q)).sum(axis=-1), 0.0)
    top2 = np.partition(ref, -2, axis=-1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) >= DELTA
    agree = ref[clear].argmax(-1) == mnn[clear].argmax(-1)
    return kl, int(clear.sum()), float(agree.mean())


def test_figures_taken_by_chunks_of_positions_equal_the_whole_array_formulas() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 3, (700, 300)).astype(np.float32)
    mnn = (ref + rng.normal(0, 0.3, ref.shape)).astype(np.float32)
    ids = rng.integers(0, 300, 700).tolist()
    tally, nll = Tally(700), Nll(ids)
    for a, b in ((0, 5), (5, 256), (256, 699), (699, 700)):  # uneven chunks, a one-row tail
        tally.add(a, ref[a:b], mnn[a:b])
        nll.add(a, mnn[a:b])
    chunked, at_once = tally.fidelity(), fidelity(ref, mnn)
    kl, n_clear, top1 = old_fidelity(ref, mnn)
    assert chunked == at_once
    assert n_clear >= MIN_CLEAR and (chunked.n_clear, chunked.top1_clear) == (n_clear, top1)
    assert chunked.kl_mean == float(kl.mean()) and chunked.kl_p99 == float(np.quantile(kl, 0.99))
    assert chunked.kl_by_position == {bucket_name(a, b): float(kl[a:b].mean()) for a, b in BUCKETS}
    assert nll.perplexity() == perplexity(mnn, ids)
    assert perplexity_of(HeadLogits(torch.from_numpy(ref), lambda h: h, 300), ids) == perplexity(ref, ids)


def test_a_position_never_scored_is_refused_not_averaged_away() -> None:
    tally = Tally(10)
    tally.add(0, np.zeros((9, 4), np.float32), np.zeros((9, 4), np.float32))
    with pytest.raises(ValueError, match="1 of 10 positions were never scored"):
        tally.fidelity()


def test_the_gate_never_holds_a_positions_by_vocabulary_array_whole(
    tiny_model: Any, tiny_artifact: tuple[Path, dict[str, Any]]
) -> None:
    """The gate's torch reference and both MNN paths scored by chunks: no [T, V] array at any time.

    tracemalloc sees every numpy buffer (the float64 temporaries, the decode path's rows, MNN's
    logits if ``read()`` copied them); torch's head output is counted by rows instead.
    """
    model, tokenizer = tiny_model.model, tiny_model.tokenizer
    asked: list[int] = []
    head = model_head(model)

    def counting(h: torch.Tensor) -> torch.Tensor:
        asked.append(len(h))
        return head(h)

    tracemalloc.start()
    try:
        fp = fp_reference(model, tokenizer)
        ref = HeadLogits(final_hidden(model, [fp.ids])[0], counting, int(model.config.vocab_size))
        scores = mnn_scores(tiny_artifact[0], fp.ids, fp.prompts_ids, ref)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    whole_bytes = len(fp.ids) * ref.vocab * 4  # one [T, V] float32: 201 MB here
    assert len(fp.ids) == 1024 and peak < whole_bytes / 2, (peak, whole_bytes)
    assert max(asked) <= ROWS and sum(asked) == 2 * len(fp.ids)  # prefill and decode, each row once
    assert scores.reference.perplexity() == pytest.approx(fp.torch_ppl, rel=1e-6)  # same fp model
    for path in (scores.prefill, scores.decode):
        assert np.isfinite(path.nll.perplexity()) and path.tally.fidelity().kl_mean < 0.1
