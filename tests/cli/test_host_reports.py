"""Issue 12, item 10 and the last of item 12: what the host commands report, and what they reuse.

- `eval` of an artifact with no fp reference says so instead of printing top-1/KL as 0.0000;
- every perplexity printed names its protocol (text, tokens, window);
- `convert` records the fp checkpoint it exported from (so `eval` finds its reference), and
  `quantize --model default` reuses that same dequantized checkpoint instead of making another.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from edgellm.host.convert import pipeline as convert_pipeline
from edgellm.host.convert.default_model import default_source
from edgellm.host.convert.gguf_to_hf import default_hf_dir
from edgellm.host.quantize import pipeline as quantize_pipeline
from tests.cli.conftest import Result


def _without_reference(artifact: Path, into: Path) -> Path:
    """The artifact's files (symlinked) under a manifest that names no fp checkpoint."""
    into.mkdir()
    for f in artifact.iterdir():
        if f.name != "manifest.json":
            (into / f.name).symlink_to(f)
    manifest = json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))
    for key in ("hf_dir", "hf_checkpoint", "path"):
        manifest["source"].pop(key, None)
    (into / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return into


def test_eval_without_a_reference_says_so_and_names_its_protocol(
    default_artifact: Path, tmp_path: Path, edgellm: Callable[..., Result]
) -> None:
    artifact = _without_reference(default_artifact, tmp_path / "a")
    r = edgellm("eval", str(artifact), "--tokens", "128", "--context", "64", "--stride", "64")
    assert r.code == 0, r.err
    assert "0.0000" not in r.out  # no invented top-1/KL
    assert "top-1 and KL not measured: no fp reference" in r.out and "--reference HF_DIR" in r.out
    protocol = "perplexity over the first 128 tokens of wikitext2-test.txt, windows of 64 tokens every 64"
    assert protocol in r.out
    mnn_row = next(line for line in r.out.splitlines() if line.startswith("mnn"))
    assert mnn_row.split()[2:] == ["-", "-"], r.out

    j = edgellm("eval", str(artifact), "--tokens", "128", "--context", "64", "--stride", "64", "--json")
    result = json.loads(j.out)
    assert result["reference"] is None and set(result["results"]["mnn"]) == {"ppl", "tokens"}


class _Stop(Exception):
    """Raised by the recording stand-in once the cache location is known (nothing is converted)."""


def test_convert_and_quantize_share_one_dequantized_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Path] = []

    def record(_gguf: Path, out_dir: Path, **_kw: object) -> Path:
        seen.append(out_dir)
        raise _Stop

    monkeypatch.setattr(convert_pipeline, "gguf_to_hf", record)
    monkeypatch.setattr("edgellm.host.convert.gguf_to_hf.gguf_to_hf", record)  # quantize imports it late
    with pytest.raises(_Stop):
        convert_pipeline.convert("default", tmp_path / "out")
    with pytest.raises(_Stop):
        quantize_pipeline.resolve_model_dir("default")
    source = default_source()
    assert seen == [default_hf_dir(source.name, source.sha256)] * 2
    assert not (tmp_path / "out").exists()


def test_convert_records_its_fp_checkpoint_for_eval(default_artifact: Path) -> None:
    """The manifest names the checkpoint `eval` compares against (an artifact built before this
    change has none; `make test` builds its own)."""
    from edgellm.host.evaluate.artifact import reference_dir

    source = json.loads((default_artifact / "manifest.json").read_text(encoding="utf-8"))["source"]
    if "hf_dir" not in source:
        pytest.skip("artifact built before convert recorded hf_dir")
    assert Path(source["hf_dir"]) == default_hf_dir(source["name"], source["sha256"])
    if (Path(source["hf_dir"]) / "config.json").is_file():
        assert reference_dir(default_artifact) == Path(source["hf_dir"])
