"""`edgellm daemon`: run the device daemon in the foreground (never self-daemonising)."""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from edgellm.common.cli_options import add_sections, sections_from, sections_given
from edgellm.common.errors import NotFound
from edgellm.common.paths import resolve_artifact
from edgellm.device.config import DaemonConfig

if TYPE_CHECKING:
    from edgellm.device.governor.platform import Platform

PlatformChooser = Callable[[DaemonConfig], "Platform"]


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], choose_platform: PlatformChooser | None = None
) -> None:
    """Add the `daemon` subcommand; its options are generated from DaemonConfig's sections.

    `choose_platform` picks the phone from the settings (`edgellm.platforms`, above the daemon).
    """
    p = sub.add_parser("daemon", help="run the device daemon (gRPC) in the foreground")
    add_sections(p, DaemonConfig)
    p.set_defaults(handler=functools.partial(run, choose_platform=choose_platform))


def _model_from(word: str | None) -> Path | None:
    """--model's artifact directory: checked now when it names a directory, else resolved later."""
    model = resolve_artifact(word) if word else None
    # A directory (a path, or 'default') must exist now; any other word is resolved in the store
    # once it is open, as LoadModel resolves it (S4: the deployed service passes an artifact id).
    looks_like_dir = word == "default" or (model is not None and ("/" in str(word) or model.is_dir()))
    if model is not None and looks_like_dir and not (model / "manifest.json").is_file():
        hint = (
            "build it with `make artifact` in the checkout, or `edgellm convert --model default -o "
            f"{model}` (a few minutes)"
            if word == "default"
            else "give an artifact directory (one with manifest.json), an installed artifact's id or "
            "name, or 'default'"
        )
        raise NotFound(f"no artifact at {model}: {hint}")
    return model


def config_from(ns: argparse.Namespace) -> DaemonConfig:
    """DaemonConfig from parsed arguments (`explicit`: the settings whose flags were given)."""
    model = _model_from(ns.model)
    if ns.max_pushes < 1 or ns.max_telemetry_streams < 1 or ns.push_idle_timeout <= 0:
        raise SystemExit("--max-pushes and --max-telemetry-streams must be >= 1, --push-idle-timeout > 0")
    # No --threads: autotune at load (EngineSettings.threads stays the fallback).
    config = DaemonConfig(**sections_from(DaemonConfig, ns), explicit=sections_given(DaemonConfig, ns))
    return config.with_settings(model=model, autotune=ns.threads is None)


def run(ns: argparse.Namespace, choose_platform: PlatformChooser | None = None) -> int:
    """Serve until interrupted, on the platform chosen (the real phone when no chooser is given)."""
    from edgellm.device.rpc.server import serve

    config = config_from(ns)
    asyncio.run(serve(config, choose_platform(config) if choose_platform is not None else None))
    return 0
