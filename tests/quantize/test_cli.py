"""`edgellm quantize` / `edgellm eval` refuse bad input with exit code 2 and one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgellm.cli import main


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
