"""`edgellm quantize` / `edgellm eval` refuse bad input with exit code 2 and one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgellm.cli import main
from edgellm.host.builder.host_source import HOST_SOURCE


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["quantize", "--plan", "int3", "-o", "x"], "plan must be one of"),
        (["quantize", "--plan", "auto", "-o", "x"], "--ppl-budget"),
        (["quantize", "--model", "/nonexistent", "-o", "x"], "not a Hugging Face checkpoint"),
        (
            ["quantize", "--calib", "/data/wikitext2-test.txt", "--method", "gptq", "-o", "x"],
            "must not use the test split",
        ),
    ],
)
def test_quantize_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_eval_missing_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(tmp_path / "none")]) == 2
    assert "not an MNN artifact" in capsys.readouterr().err


def test_ppl_budget_accepts_percent_and_fraction() -> None:
    import argparse

    from edgellm.host.quantize.cli import relative_budget

    assert relative_budget("3%") == pytest.approx(0.03) and relative_budget("0.08") == 0.08
    for bad in ("three", "-1%", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            relative_budget(bad)


def test_eval_without_an_fp_reference_says_so_instead_of_printing_zeros(
    tiny_artifact: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    path, _ = tiny_artifact
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in path.iterdir():
        if f.name != HOST_SOURCE:  # the building host's record of where its source lives
            (moved / f.name).symlink_to(f.resolve())
    (moved / "manifest.json").unlink()
    doc = json.loads((path / "manifest.json").read_text())
    doc["source"]["hf_dir"] = str(tmp_path / "gone")  # built on another host
    (moved / "manifest.json").write_text(json.dumps(doc))
    assert main(["eval", str(moved), "--legacy", "--tokens", "128", "--context", "64", "--stride", "32"]) == 0
    out = capsys.readouterr().out
    assert "top-1 and KL not measured: no fp reference" in out and "gone" in out
    assert (
        "0.0000" not in out and "first 128 tokens of wikitext2-test.txt, windows of 64 tokens every 32" in out
    )


def test_a_converted_artifact_records_its_fp_reference(default_artifact: Path) -> None:
    from edgellm.host.evaluate.artifact import reference_dir

    reference, why = reference_dir(default_artifact)
    assert reference is not None and (reference / "config.json").is_file() and why == ""
