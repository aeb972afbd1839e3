"""The conversion gate's fidelity statistic on synthetic logits, and its place in the manifest."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from edgellm.common.manifest import Checks, Fidelity
from edgellm.common.typed_json import read_dataclass
from edgellm.host.convert.fidelity import MIN_CLEAR, Limits, clear_positions, failures, fidelity
from edgellm.host.convert.verify import ConversionCheckFailed, check_fidelity, check_quality

T, V = 1024, 2000


def _noise(rng: np.random.Generator, scale: float) -> np.ndarray:
    return rng.normal(0.0, scale, (T, V)).astype(np.float32)


def test_flat_distributions_do_not_fail_by_near_ties() -> None:
    """Random-weight logits (std 0.16, as a flat tiny model's) plus rounding-sized noise."""
    rng = np.random.default_rng(0)
    ref = _noise(rng, 0.16)
    mnn = ref + _noise(rng, 0.01)
    plain_top1 = float((ref.argmax(-1) == mnn.argmax(-1)).mean())
    assert plain_top1 < 0.95  # the old statistic: decided by near-ties
    fid = fidelity(ref, mnn)
    assert fid.n_clear < MIN_CLEAR and fid.top1_clear is None  # no confident position to judge
    assert fid.kl_mean < 1e-3
    assert failures(fid, Limits()) == []


def test_a_confident_reference_with_rounding_noise_passes() -> None:
    rng = np.random.default_rng(1)
    ref = _noise(rng, 8.0)  # peaked: a clear top-1 at most positions
    mnn = ref + _noise(rng, 0.01)
    fid = fidelity(ref, mnn)
    assert fid.n_clear > T // 2 and fid.top1_clear == 1.0
    assert failures(fid, Limits()) == []


def test_a_distribution_shifted_past_position_512_fails_naming_the_bucket() -> None:
    """What a wrong RoPE does: right at first, wrong further out."""
    rng = np.random.default_rng(2)
    ref = _noise(rng, 8.0)
    mnn = ref + _noise(rng, 0.01)
    mnn[512:] = np.roll(ref[512:], 1, axis=-1)  # the same shape, on the wrong tokens
    fid = fidelity(ref, mnn)
    assert fid.kl_by_position["0-63"] < 1e-3 < fid.kl_by_position["512+"]
    assert fid.top1_clear is not None and fid.top1_clear < 0.6
    with pytest.raises(ConversionCheckFailed) as err:
        check_fidelity({"prefill": fidelity(ref, ref), "decode": fid}, Limits())
    message = str(err.value)
    assert "decode path" in message and "mean KL(torch‖MNN)" in message and "top-1 agreement" in message
    assert "512+" in message and "rising with position" in message


def test_top1_is_judged_only_where_torch_is_clear() -> None:
    ref = np.zeros((4, 5), dtype=np.float32)
    ref[0, 1] = 1.5  # gap 1.5 nat: clear
    ref[1, 2] = 0.5  # gap 0.5 nat: a near-tie
    ref[2, [0, 3]] = 2.0  # two equal tops: a tie
    ref[3, 4] = 1.0  # exactly delta: clear
    assert clear_positions(ref).tolist() == [True, False, False, True]


def test_a_flipped_top1_at_clear_positions_fails_even_with_a_small_mean_kl() -> None:
    fid = Fidelity(
        kl_mean=1e-5, kl_p99=1e-4, kl_by_position={"0-63": 1e-5}, top1_clear=0.9, n_clear=100, delta=1.0
    )
    (reason,) = failures(fid, Limits())
    assert "top-1 agreement at the 100 positions" in reason and "0.900 < 0.98" in reason


def test_nan_kl_fails() -> None:
    fid = Fidelity(kl_mean=float("nan"), kl_p99=0.0, kl_by_position={}, top1_clear=None, n_clear=0, delta=1.0)
    assert failures(fid, Limits()) != []


OLD_CHECKS: dict[
    str, Any
] = {  # a schema-2 manifest's checks from before the fidelity gate (the default artifact's)
    "eval_file": "wikitext2-test.txt",
    "eval_tokens": 1024,
    "torch_ppl": 10.964,
    "mnn_ppl": 10.993,
    "mnn_ppl_prefill": 10.976,
    "mnn_ppl_decode": 10.993,
    "ppl_ratio": 1.0026,
    "agreement": 1.0,
    "agree_count": 8,
    "prompts": 8,
    "prefill_tokens_per_second": 180.0,
    "decode_tokens_per_second": 40.0,
}


def test_checks_written_before_the_fidelity_gate_still_load() -> None:
    checks = read_dataclass(Checks, OLD_CHECKS)
    assert checks.fidelity_decode is None and checks.max_kl is None


def test_fidelity_checks_round_trip_through_json() -> None:
    from dataclasses import asdict

    fid = Fidelity(1e-4, 1e-3, {"0-63": 1e-4, "64-511": 1e-4, "512+": 2e-4}, 1.0, 900, 1.0)
    checks = Checks(**OLD_CHECKS, torch_quant_ppl=11.0, fidelity_prefill=fid, fidelity_decode=fid)
    assert read_dataclass(Checks, json.loads(json.dumps(asdict(checks)))) == checks


def test_the_perplexity_ratio_is_judged_for_a_trained_model_only() -> None:
    """An untrained checkpoint (torch ppl >= vocabulary) has no quality to lose: fidelity decides."""
    tiny_gemma3_int4 = {"prefill": 12.03e9, "decode": 12.05e9}  # torch fp 1.09e10, vocab 49,152
    check_quality(tiny_gemma3_int4, 10.86e9, 1.05, vocab=49152)
    with pytest.raises(ConversionCheckFailed, match=r"ratio 1\.110"):
        check_quality(tiny_gemma3_int4, 10.86e9, 1.05)
    with pytest.raises(ConversionCheckFailed, match=r"ratio 1\.060"):
        check_quality({"prefill": 11.6, "decode": 11.0}, 10.943, 1.05, vocab=49152)
    with pytest.raises(ConversionCheckFailed):  # degenerate logits fail whatever the model
        check_quality({"prefill": 1.01, "decode": 1.0}, 6e4, 1.05, vocab=49152)
