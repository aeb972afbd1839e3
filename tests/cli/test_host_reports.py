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

from edgellm.host.builder import source as builder_source
from edgellm.host.builder.host_source import HOST_SOURCE, host_hf_dir
from edgellm.host.builder.source import default_hf_dir
from edgellm.host.convert.default_model import default_source
from tests.cli.conftest import Result


def _without_reference(artifact: Path, into: Path) -> Path:
    """The artifact's files (symlinked) under a manifest whose fp checkpoint is not on this host."""
    into.mkdir()
    for f in artifact.iterdir():
        if f.name not in ("manifest.json", HOST_SOURCE):
            (into / f.name).symlink_to(f)
    manifest = json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))
    manifest["source"]["hf_dir"] = str(into / "not-on-this-host")
    (into / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return into


def test_eval_without_a_reference_says_so_and_names_its_protocol(
    default_artifact: Path, tmp_path: Path, edgellm: Callable[..., Result]
) -> None:
    artifact = _without_reference(default_artifact, tmp_path / "a")
    # --legacy: the quick check's ppl/top-1/KL table (the default is the paired two-path protocol)
    r = edgellm("eval", str(artifact), "--legacy", "--tokens", "128", "--context", "64", "--stride", "64")
    assert r.code == 0, r.err
    assert "0.0000" not in r.out  # no invented top-1/KL
    assert "top-1 and KL not measured: no fp reference" in r.out and "--reference HF_DIR" in r.out
    protocol = "perplexity over the first 128 tokens of wikitext2-test.txt, windows of 64 tokens every 64"
    assert protocol in r.out
    mnn_row = next(line for line in r.out.splitlines() if line.startswith("mnn"))
    assert mnn_row.split()[2:] == ["-", "-"], r.out

    j = edgellm(
        "eval", str(artifact), "--legacy", "--tokens", "128", "--context", "64", "--stride", "64", "--json"
    )
    result = json.loads(j.out)
    assert result["reference"] is None and set(result["results"]["mnn"]) == {"ppl", "tokens"}


class _Stop(Exception):
    """Raised by the recording stand-in once the cache location is known (nothing is converted)."""


def test_convert_and_quantize_share_one_dequantized_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both open the model through the builder's LoadedModel, whose GGUF goes to one cache key."""
    from edgellm.host.builder.loaded import LoadedModel
    from edgellm.host.evaluate.evaluate import EvalConfig

    seen: list[Path] = []

    def record(_gguf: Path, out_dir: Path, **_kw: object) -> Path:
        seen.append(out_dir)
        raise _Stop

    monkeypatch.setattr(builder_source, "gguf_to_hf", record)
    with pytest.raises(_Stop):
        LoadedModel.open("default", EvalConfig())
    source = default_source()
    assert seen == [default_hf_dir(source.name, source.sha256)]


def test_convert_records_its_fp_checkpoint_for_eval(default_artifact: Path) -> None:
    """The manifest names the checkpoint `eval` compares against."""
    from edgellm.common.artifact_files import read_manifest
    from edgellm.host.evaluate.artifact import reference_dir

    manifest, _ = read_manifest(default_artifact)
    hf_dir = host_hf_dir(default_artifact, manifest)
    assert hf_dir == default_hf_dir(manifest.source.name, manifest.source.sha256)
    if (hf_dir / "config.json").is_file():
        assert reference_dir(default_artifact)[0] == hf_dir
