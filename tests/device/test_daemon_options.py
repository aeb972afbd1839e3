"""`edgellm daemon`'s options are generated from DaemonConfig: one default per setting, same parsing."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from edgellm.common.cli_options import values_from
from edgellm.common.tokens import TOKEN_ENV
from edgellm.device import cli as daemon_cli
from edgellm.device.config import DaemonConfig
from edgellm.device.governor.actuation import GovernorPolicy, ThermalPolicy
from edgellm.engine.config import KvQuant
from edgellm.engine.kv_window import KvMethod


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    daemon_cli.register(parser.add_subparsers())
    return parser


def _daemon_parser() -> argparse.ArgumentParser:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices["daemon"]
    return parser


@pytest.fixture(autouse=True)
def _no_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def _sections() -> list[tuple[str, type[Any]]]:
    return [(s.name, s.default_factory) for s in dataclasses.fields(DaemonConfig) if "section" in s.metadata]  # type: ignore[misc]


def test_every_field_with_cli_metadata_has_exactly_one_flag_whose_default_is_the_fields() -> None:
    parser = _daemon_parser()
    ns = parser.parse_args([])
    flagged = 0
    for name, cls in _sections():
        unset = values_from(cls, ns)
        defaults = getattr(DaemonConfig(), name)
        for f in (f for f in dataclasses.fields(cls) if "flag" in f.metadata):
            flagged += 1
            actions = [a for a in parser._actions if f.metadata["flag"] in a.option_strings]
            assert len(actions) == 1, f.name
            # An unset flag gives the field's default, or leaves the field out so that it keeps it.
            assert unset.get(f.name, getattr(defaults, f.name)) == getattr(defaults, f.name), f.name
    assert flagged == len([a for a in parser._actions if a.option_strings]) - 1  # less --help


def test_setting_names_are_unique_across_sections_and_unknown_ones_are_refused() -> None:
    names = [f.name for _, cls in _sections() for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names))
    with pytest.raises(TypeError, match="no setting"):
        DaemonConfig.of(no_such_setting=1)


def test_help_groups_the_flags_by_section() -> None:
    text = _daemon_parser().format_help()
    for title in ("server", "security", "store", "engine", "kv cache", "governor"):
        assert f"\n{title}:" in text, title


def test_no_arguments_build_the_defaults_with_threads_autotuned() -> None:
    config = daemon_cli.config_from(_parser().parse_args(["daemon"]))
    assert config == DaemonConfig.of(autotune=True)


def test_representative_command_lines_build_the_same_config_as_before(tmp_path: Path) -> None:
    """Expected values written from the hand-written options before they were generated."""
    data = tmp_path / "data"
    argv = [
        "daemon", "--host", "0.0.0.0", "--port", "0", "--data-dir", str(data), "--threads", "3",
        "--draft-max", "0", "--queue-size", "3", "--max-new-tokens-cap", "100", "--kv-window", "512",
        "--n-keep", "-1", "--kv-chunk", "64", "--kv-method", "reprefill", "--kv-quant", "int8",
        "--kv-tiers", "128, 256", "--no-warmup", "--warmup-tokens", "16", "--store-quota", "8G",
        "--disk-reserve", "2G", "--allow-dir-load", "--auth-token", "t0k", "--auth-token-file", "tf",
        "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-self-signed", "--max-pushes", "3",
        "--push-idle-timeout", "5", "--push-min-rate", "10", "--push-rate-grace", "7",
        "--max-telemetry-streams", "2", "--virtual-phone", "pixel", "--time-scale", "10",
        "--governor", "pinned", "--thermal-policy", "throughput", "--setpoint", "40.5",
        "--sysfs-root", "/tmp/sys",
    ]  # fmt: skip
    assert daemon_cli.config_from(_parser().parse_args(argv)) == DaemonConfig.of(
        host="0.0.0.0",
        port=0,
        data_dir=data,
        threads=3,
        autotune=False,
        draft_max=0,
        queue_size=3,
        max_new_tokens_cap=100,
        kv_window=512,
        n_keep=-1,
        kv_chunk=64,
        kv_method=KvMethod.REPREFILL,
        kv_quant=KvQuant("int8"),
        kv_tiers=(128, 256),
        warmup=False,
        warmup_tokens=16,
        store_quota_bytes=8 << 30,
        disk_reserve_bytes=2 << 30,
        allow_dir_load=True,
        auth_token="t0k",
        auth_token_file=Path("tf"),
        tls_cert=Path("c.pem"),
        tls_key=Path("k.pem"),
        tls_self_signed=True,
        max_pushes=3,
        push_idle_timeout_s=5.0,
        push_min_bytes_per_s=10,
        push_rate_grace_s=7.0,
        max_telemetry_streams=2,
        virtual_phone="pixel",
        virtual_phone_time_scale=10.0,
        governor_policy=GovernorPolicy.PINNED,
        thermal_policy=ThermalPolicy.THROUGHPUT,
        setpoint_c=40.5,
        sysfs_root=Path("/tmp/sys"),
    )
    minimal = daemon_cli.config_from(
        _parser().parse_args(["daemon", "--insecure-loopback", "--threads", "1"])
    )
    assert minimal == DaemonConfig.of(insecure_loopback=True, threads=1, autotune=False)


def test_the_token_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert daemon_cli.config_from(_parser().parse_args(["daemon"])).security.auth_token == "from-env"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-pushes", "0"], "--max-pushes and --max-telemetry-streams must be >= 1"),
        (["--push-idle-timeout", "0"], "--push-idle-timeout > 0"),
    ],
)
def test_out_of_range_limits_still_exit_with_the_same_message(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        daemon_cli.config_from(_parser().parse_args(["daemon", *argv]))


def test_bad_kv_tiers_still_say_what_the_flag_takes() -> None:
    with pytest.raises(ValueError, match="--kv-tiers takes token counts"):
        daemon_cli.config_from(_parser().parse_args(["daemon", "--kv-tiers", "lots"]))


def test_bad_values_are_still_refused_by_argparse() -> None:
    for argv in (["--draft-max", "3"], ["--kv-method", "x"], ["--threads", "0"], ["--time-scale", "0"]):
        with pytest.raises(SystemExit):
            _parser().parse_args(["daemon", *argv])
