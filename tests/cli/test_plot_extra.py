"""Plotting is its own extra (`plot`): the phone's `client` set has no matplotlib, and --plot says so."""

from __future__ import annotations

import socket
import sys
import tomllib
from pathlib import Path

import pytest

from edgellm.cli import main

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_client_extra_has_no_matplotlib_and_the_plot_and_dev_sets_do() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any(r.startswith("matplotlib") for r in extras["client"] + extras["device"])
    assert any(r.startswith("matplotlib") for r in extras["plot"])
    assert "plot" in extras["dev"][0] and "plot" in extras["host"][0]


@pytest.mark.parametrize("mode", [["--samples", "2"], ["--from", "rec.jsonl"]])
def test_telemetry_plot_without_matplotlib_names_the_extra_and_exits_before_sampling(
    mode: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # None in sys.modules is how Python marks a module as not importable: find_spec gives None and
    # `import matplotlib` raises ImportError, as on a phone that installed edgellm[device,client].
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rec.jsonl").write_text('{"unix_time": 1.0}\n')
    png = tmp_path / "t.png"
    # Nothing listens on the target: a command that sampled first would fail with "unavailable".
    code = main(["telemetry", "--target", f"127.0.0.1:{free_port()}", "--plot", str(png), *mode])
    err = capsys.readouterr().err
    assert code != 0
    assert "pip install 'edgellm[plot]'" in err and "matplotlib" in err
    assert "unavailable" not in err.lower() and not png.exists()
