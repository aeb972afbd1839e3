"""`edgellm config set` survives a restart: what UpdateConfig changed, in `<data_dir>/settings.json`.

Only the fields an update gave are saved (merged over earlier ones); at start the daemon applies
them over its defaults, after the model is loaded (a window is checked against the model's
context). A flag given on the command line wins over a saved value, as in every tool: flag >
saved > default (`overridden_by`). `forget_saved` (`edgellm config reset`) deletes the file, and
the core puts back the startup values (core/reset.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgellm.common.logs import get_logger
from edgellm.device.config import DaemonConfig, setting_field
from edgellm.device.core.state import ConfigUpdate
from edgellm.device.governor.actuation import GovernorPolicy
from edgellm.device.governor.runtime import GovernorUpdate

log = get_logger(__name__)

FILE = "settings.json"
_PINS = ("pacing_ms", "power", "cluster")


def overridden_by(saved: dict[str, Any], explicit: frozenset[str]) -> dict[str, str]:
    """The saved fields an explicit command-line setting overrides -> the setting that does.

    Saved names are UpdateConfigRequest's, which are DaemonConfig's for the settings with flags
    (threads, kv_window, n_keep, governor_policy, setpoint_c). Saved pins go with an explicit
    `--governor` too: applying one would switch the policy to pinned.
    """
    over = {k: k for k in saved if k in explicit}
    if "governor_policy" in explicit:
        over.update({k: "governor_policy" for k in saved if k in _PINS})
    return over


def describe_overrides(saved: dict[str, Any], over: dict[str, str], config: DaemonConfig) -> dict[str, str]:
    """For the log: each overridden saved field, its saved value and the flag kept instead."""
    flags = {k: f"{setting_field(by).metadata['flag']} {config.setting(by)}" for k, by in over.items()}
    return {k: f"saved {saved[k]}, kept {flags[k]} (given on the command line)" for k in over}


def to_dict(change: ConfigUpdate) -> dict[str, Any]:
    """The fields CHANGE sets, by their UpdateConfigRequest names."""
    g = change.governor
    fields = {
        "threads": change.threads,
        "kv_window": change.kv_window,
        "n_keep": change.n_keep,
        "governor_policy": g.policy.value if g.policy is not None else None,
        "setpoint_c": g.setpoint_c,
        "pacing_ms": g.pacing_ms,
        "power": g.power,
        "cluster": g.cluster,
    }
    return {k: v for k, v in fields.items() if v is not None}


def from_dict(d: dict[str, Any]) -> ConfigUpdate:
    """The ConfigUpdate a saved dictionary describes (ValueError/TypeError if it is malformed)."""
    policy = d.get("governor_policy")
    return ConfigUpdate(
        threads=_opt(d, "threads", int),
        kv_window=_opt(d, "kv_window", int),
        n_keep=_opt(d, "n_keep", int),
        governor=GovernorUpdate(
            policy=GovernorPolicy(policy) if policy is not None else None,
            setpoint_c=_opt(d, "setpoint_c", float),
            pacing_ms=_opt(d, "pacing_ms", float),
            power=_opt(d, "power", str),
            cluster=_opt(d, "cluster", str),
        ),
    )


def _opt(d: dict[str, Any], key: str, kind: type) -> Any:
    value = d.get(key)
    allowed = (float, int) if kind is float else (kind,)  # JSON writes 40.0 back as 40
    if value is not None and not isinstance(value, allowed):
        raise TypeError(f"{key} is {value!r}")
    return value


class SavedSettings:
    """Reads, merges into and forgets `<data_dir>/settings.json`."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE

    def read(self) -> dict[str, Any]:
        """The saved fields ({} when there is no file or it cannot be read)."""
        try:
            value = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.warning("saved_settings_unreadable", path=str(self.path), reason=str(err))
            return {}
        return value if isinstance(value, dict) else {}

    def load(self, fields: dict[str, Any]) -> ConfigUpdate | None:
        """The update saved FIELDS (read() less any overridden) describe, or None (none, or malformed)."""
        if not fields:
            return None
        try:
            return from_dict(fields)
        except (TypeError, ValueError) as err:
            log.warning("saved_settings_ignored", path=str(self.path), reason=str(err))
            return None

    def add(self, change: ConfigUpdate) -> None:
        """Merge CHANGE's fields over the saved ones (a new policy drops pins saved before it)."""
        fields = to_dict(change)
        if not fields:
            return
        saved = self.read()
        if "governor_policy" in fields:
            saved = {k: v for k, v in saved.items() if k not in _PINS}
        merged = {**saved, **fields}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(merged, indent=1) + "\n")
        tmp.replace(self.path)  # atomic: a crash mid-write leaves the old file

    def forget(self) -> None:
        """Delete the saved settings."""
        self.path.unlink(missing_ok=True)
