"""The paired evaluation: documents and slices, block bootstrap, both scoring paths on real models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgellm.host.evaluate.bootstrap import PairedBootstrap, block_ids
from edgellm.host.evaluate.corpus import Slice, articles


def _text(n_articles: int, words: int) -> str:
    parts = [
        f" \n = Article {k} = \n \n " + " ".join(f"w{k}x{i}" for i in range(words)) for k in range(n_articles)
    ]
    return "\n".join(parts) + "\n"


def _split(text: str) -> list[int]:
    return [sum(map(ord, w)) % 1000 for w in text.split()]


def test_articles_start_at_top_level_headings_only() -> None:
    text = " \n = A = \n \n x \n = = Sub = = \n y \n = B = \n z \n"
    arts = articles(text)
    assert [a.split("\n")[1 - k] for k, a in enumerate(arts)] == [" = A = ", " = B = "]
    assert "= = Sub = =" in arts[0]


def test_dev_and_heldout_slices_are_disjoint_halves(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text(_text(10, 50))
    dev = Slice("dev", tokens=200, doc_tokens=40, text_file=f).documents(_split)
    held = Slice("heldout", tokens=200, doc_tokens=40, text_file=f).documents(_split)
    assert len(dev) == len(held) == 5 and all(len(d) == 40 for d in dev + held)
    assert not set(map(tuple, dev)) & set(map(tuple, held))


def test_the_real_test_split_holds_out_its_second_half() -> None:
    s = Slice("heldout", tokens=64, doc_tokens=64)
    arts = articles(s.path().read_text(encoding="utf-8"))
    assert len(arts) == 62
    assert list(s.article_range(62)) == list(range(31, 62))
    assert list(Slice("dev").article_range(62)) == list(range(31))


def test_a_slice_too_short_for_the_tokens_asked_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text(_text(2, 10))
    with pytest.raises(ValueError, match="yields only"):
        Slice("dev", tokens=500, text_file=f).documents(_split)
    with pytest.raises(ValueError, match="slice must be"):
        Slice("test")


def test_bootstrap_units_are_blocks_inside_documents() -> None:
    units = block_ids([5, 3], block=2)
    assert units.tolist() == [0, 0, 1, 1, 2, 3, 3, 4]


def test_paired_bootstrap_intervals_are_deterministic_and_paired() -> None:
    rng = np.random.default_rng(0)
    base = rng.gamma(2.0, 1.5, 4096)
    worse = base + 0.05 + rng.normal(0, 0.01, 4096)
    units = block_ids([4096], 128)
    a = PairedBootstrap({"fp": base * 0.9, "rtn": worse, "m": base}, units)
    b = PairedBootstrap({"fp": base * 0.9, "rtn": worse, "m": base}, units)
    assert a.delta("m", "rtn") == b.delta("m", "rtn")
    d = a.delta("m", "rtn")
    assert d.high < 0 and d.excludes_zero()  # a small but consistent gain is significant when paired
    assert a.delta("m", "m").value == 0 == a.delta("m", "m").low
    p = a.ppl("m")
    assert p.low < p.value < p.high
    r = a.removed("m", "rtn", "fp")
    assert 0 < r.low < r.value < r.high < 1
    with pytest.raises(ValueError, match="same"):
        PairedBootstrap({"x": base[:10]}, units)


def test_a_stride_that_leaves_tokens_unscored_is_refused_before_any_model_runs() -> None:
    from edgellm.common.errors import InvalidArgument
    from edgellm.host.evaluate.protocol import Protocol
    from edgellm.host.evaluate.windows import windows

    # stride == context skips each later window's first token: prefill would score fewer than decode
    assert sum(w.n_scored for w in windows(1000, 512, 512)) == 998
    assert sum(w.n_scored for w in windows(1000, 512, 511)) == 999
    for stride in (512, 600, 0):
        with pytest.raises(InvalidArgument, match="lower --stride"):
            Protocol(context=512, stride=stride)
    assert Protocol(context=512, stride=512, paths=("decode",)).stride == 512  # no windows scored


def test_both_paths_agree_when_the_window_holds_the_whole_document(
    tiny_artifact: tuple[Path, dict[str, Any]], tiny_hf: Path
) -> None:
    from transformers import AutoModelForCausalLM

    from edgellm.host.evaluate.runners import MnnRunner, TorchRunner, score_document

    doc = list(np.random.default_rng(1).integers(100, 5000, 48))
    fp = TorchRunner(AutoModelForCausalLM.from_pretrained(str(tiny_hf)))
    window, stream = (score_document(fp, doc, p, 64, 32) for p in ("prefill", "decode"))
    assert window.shape == stream.shape == (47,)
    np.testing.assert_allclose(window, stream, rtol=1e-4, atol=1e-4)
    mnn = MnnRunner(tiny_artifact[0])
    window, stream = (score_document(mnn, doc, p, 64, 32) for p in ("prefill", "decode"))
    mnn.close()
    # MNN quantizes activations per forward: prefill and decode round differently, but only slightly.
    assert abs(float(np.exp(window.mean()) / np.exp(stream.mean())) - 1) < 0.02


def test_eval_cli_reports_both_paths_with_paired_intervals_and_caches_scores(
    tiny_artifact: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from edgellm.cli import main

    monkeypatch.setenv("EDGELLM_CACHE_DIR", str(tmp_path / "cache"))
    text = tmp_path / "t.txt"
    text.write_text(_text(4, 60))
    art = tiny_artifact[0]
    args = ["eval", f"a={art}", f"b={art}", "--text", str(text), "--tokens", "120", "--doc-tokens", "60"]
    assert main([*args, "--context", "32", "--stride", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["baseline"] == "a" and out["fp"] == "fp" and out["scored_tokens"] == 118
    for path in ("prefill", "decode"):
        row = out["models"]["b"][path]
        assert row["delta_vs_baseline"] == {"value": 0.0, "low": 0.0, "high": 0.0}  # same artifact
        assert row["delta_vs_fp"]["low"] <= row["delta_vs_fp"]["value"] <= row["delta_vs_fp"]["high"]
    cached = sorted(p.name for p in (tmp_path / "cache" / "eval").iterdir())
    assert len(cached) == 6  # fp, a, b x prefill, decode
    assert main([*args, "--context", "32", "--stride", "16"]) == 0  # from the cache
    assert "removed" in capsys.readouterr().out
    assert main(["eval", str(tmp_path / "nothing")]) == 2


def test_the_quick_check_text_stops_before_the_heldout_slice() -> None:
    from edgellm.host.evaluate.corpus import HELDOUT_FROM
    from edgellm.host.evaluate.evaluate import EvalConfig

    text = EvalConfig(tokens=10**6).text()
    held = articles(Slice("heldout").path().read_text(encoding="utf-8"))[HELDOUT_FROM]
    assert held.split("\n")[0].startswith(" = ") and held.split("\n")[0] not in text
    assert text.startswith(" \n = Robert <unk> = ")
