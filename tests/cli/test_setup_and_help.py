"""What a machine with only the clone needs: packaged data, a sane cache, inputs checked up front,
help and defaults on every option, --version, and a dry-run deploy that starts nothing."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

import edgellm
from edgellm.cli import build_parser
from edgellm.common import paths
from tests.cli.conftest import Result, free_port
from tests.cli.test_errors_and_auth import edgellm_process


def test_the_evaluation_text_ships_with_the_package_and_its_licence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(paths.DATA_ENV, raising=False)
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    folder = paths.data_dir()
    assert folder == tmp_path / "cache" / "data"
    for name, sha in paths.PACKAGED_DATA.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == sha
    readme = (Path(paths.__file__).parents[1] / "data" / "README.md").read_text(encoding="utf-8")
    assert "CC BY-SA 3.0" in readme and "Merity" in readme


def test_a_corrupt_packaged_text_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "PACKAGED_DATA", {"wikitext2-test.txt": "0" * 64})
    with pytest.raises(RuntimeError, match="corrupt"):
        paths._unpack("wikitext2-test.txt", "0" * 64, tmp_path)
    assert not (tmp_path / "wikitext2-test.txt").exists()


def test_edgellm_data_dir_overrides_the_packaged_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path))
    assert paths.data_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match="unset \\$EDGELLM_DATA_DIR"):
        paths.require_data_file("wikitext2-test.txt")


def test_an_installed_package_caches_in_the_users_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(paths.CACHE_ENV, raising=False)
    assert paths.source_root() is not None and paths.cache_dir() == paths.source_root() / ".cache"  # type: ignore[operator]
    # As installed into site-packages: no checkout around the package.
    monkeypatch.setattr(paths, "_PACKAGE_ROOT", tmp_path / "lib" / "python3.11" / "site-packages" / "edgellm")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.source_root() is None and paths.cache_dir() == tmp_path / "xdg" / "edgellm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_dir() == tmp_path / "home" / ".cache" / "edgellm"
    assert paths.default_artifact_dir() == tmp_path / "home" / ".cache" / "edgellm" / "artifacts" / "default"


def test_the_wheel_carries_the_data(tmp_path: Path) -> None:
    """Package data as pyproject declares it (what `pip install .` installs)."""
    import tomllib

    config = tomllib.loads((Path(paths.__file__).parents[3] / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["edgellm.data"]
    data = Path(paths.__file__).parents[1] / "data"
    for name in paths.PACKAGED_DATA:
        assert any(Path(f"{name}.gz").match(p) for p in patterns)
        assert gzip.decompress((data / f"{name}.gz").read_bytes())[:2] == b" \n"


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "--model", "default", "-o", "{tmp}/out"],
        ["quantize", "--model", "default", "--method", "rtn", "-o", "{tmp}/out"],
        ["eval", "default"],
    ],
)
def test_host_commands_check_the_evaluation_text_before_long_work(tmp_path: Path, argv: list[str]) -> None:
    r = edgellm_process(*(a.format(tmp=tmp_path) for a in argv), env={"EDGELLM_DATA_DIR": str(tmp_path)})
    assert r.returncode == 2 and "wikitext2-" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()  # refused before any conversion wrote a byte (not timed)


def test_version(edgellm: Callable[..., Result]) -> None:
    r = edgellm("--version")
    assert r.code == 0 and r.out.strip() == f"edgellm {edgellm_version()}"


def edgellm_version() -> str:
    return edgellm.__version__


def _parsers(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parsers(sub, f"{path} {name}")
    return out


def test_every_option_has_help_and_shows_its_default() -> None:
    missing = []
    for path, parser in _parsers(build_parser(), "edgellm"):
        for action in parser._actions:
            if isinstance(
                action, argparse._HelpAction | argparse._SubParsersAction | argparse._VersionAction
            ):
                continue
            if not action.help:
                missing.append(f"{path} {action.option_strings or action.dest}")
    assert not missing, missing
    help_text = dict(_parsers(build_parser(), "edgellm"))["edgellm generate"].format_help()
    text = " ".join(help_text.split())  # argparse wraps help to the terminal's width
    model = "(default: the loaded model's, from its generation_config.json; {} for the bundled SmolLM2)"
    assert (
        model.format(0.2) in text
        and "(default: the loaded model's, 0.7 for the bundled SmolLM2; 0 with an output constraint)" in text
        and "(default: 256)" in text
    )
    assert "0 = off " + model.format(0) in text  # a zero default is shown (0 == False, but not `is`)
    assert "(default: None)" not in text and "(default: False)" not in text


def test_no_secret_default_shows_in_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGELLM_TOKEN", "hunter2")
    for _, parser in _parsers(build_parser(), "edgellm"):
        assert "hunter2" not in parser.format_help()


def test_a_dry_run_deploy_without_an_adb_server_starts_none(
    edgellm: Callable[..., Result], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A named fake `adb` (this host has no platform-tools) records every run: adbutils runs
    `adb start-server` through it when asked to reach a server that is not there."""
    calls = tmp_path / "adb-calls.txt"
    fake_adb = tmp_path / "adb"
    fake_adb.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake_adb.chmod(0o755)
    monkeypatch.setenv("ADBUTILS_ADB_PATH", str(fake_adb))
    port = free_port()
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
    r = edgellm("deploy", "device", "--dry-run")
    assert r.code == 1 and "no adb server is running" in r.err and "Traceback" not in r.err
    assert not calls.exists(), f"adb was run: {calls.read_text()}"
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "an adb server was started"
