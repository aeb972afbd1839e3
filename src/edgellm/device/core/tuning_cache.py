"""Load-time measurements kept per (artifact, CPU set) so a restart does not measure again.

`<data_dir>/autotune.json` maps a key (the artifact id, the CPUs this process may run on, the CPU
model and MNN version) to the `ThreadTuning` measured there; `<data_dir>/forward_costs.json` maps
the same key plus the engine settings (threads, power, precision, …) to the `ForwardCosts` timed
at load (the decode step the rate watch compares against, core/retune.py). Another phone, another
affinity mask (Termux under a different cpuset), another artifact or another MNN gives another
key, so it is measured afresh. A damaged file is ignored
(and replaced on the next save): a cache miss only costs the seconds of measuring.

Only clean measurements are saved: a tuning or a set of costs timed under contention
(core/contention.py) is used for that load and measured again at the next idle moment
(core/retune.py); each tuning keeps when it was measured, shown as its age by `edgellm status`.

The forward costs no longer decide draft lengths (issue 31): the draft policy prices verifies by
the engine's fixed `DraftCosts`, so no timing here can change a `fast` or seeded answer.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, fields
from importlib import metadata
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.device.core.autotune import ThreadTrial, ThreadTuning
from edgellm.engine.config import EngineConfig
from edgellm.engine.costs import ForwardCosts

log = get_logger(__name__)

FILE = "autotune.json"
COSTS_FILE = "forward_costs.json"


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model line ('model name' on x86, 'Hardware'/'CPU part' on ARM), '' if unreadable."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return ""
    for field in ("model name", "Hardware", "CPU part"):
        for line in text.splitlines():
            if line.startswith(field):
                return line.split(":", 1)[-1].strip()
    return ""


def _mnn_version() -> str:
    try:
        return metadata.version("MNN")
    except metadata.PackageNotFoundError:
        return ""


def tuning_key(artifact_id: str, cpus: frozenset[int] | None = None) -> str:
    """The cache key: artifact, usable CPU set, CPU model, machine, MNN version."""
    if cpus is None:
        cpus = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
    parts = [artifact_id, ",".join(map(str, sorted(cpus))), _cpu_model(), platform.machine(), _mnn_version()]
    return "|".join(parts)


def costs_key(tuning: str, config: EngineConfig) -> str:
    """The forward-costs key: the tuning key plus every engine setting (threads, power, precision…)."""
    settings = ",".join(f"{f.name}={getattr(config, f.name)}" for f in fields(config))
    return f"{tuning}|{settings}"


class JsonMap:
    """One JSON object in a file of the data directory, saved atomically; unreadable = empty."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, object]:
        """The saved map ({} when the file is missing or damaged)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.warning("tuning_cache_unreadable", path=str(self.path), error=str(err))
            return {}
        return data if isinstance(data, dict) else {}

    def put(self, key: str, entry: object) -> None:
        """Save `entry` under `key` (atomically: a reader sees the old file or the new one)."""
        data = self.read()
        data[key] = entry
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(self.path)
        except OSError as err:  # a read-only data dir costs a re-measure at the next start, nothing more
            log.warning("tuning_cache_not_saved", path=str(self.path), error=str(err))


class TuningCache:
    """Saved autotune results (`autotune.json`)."""

    def __init__(self, data_dir: Path) -> None:
        self._map = JsonMap(data_dir / FILE)
        self.path = self._map.path

    def get(self, key: str) -> ThreadTuning | None:
        """The tuning saved for `key`, if any (None when the file is missing or damaged)."""
        entry = self._map.read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            trials = tuple(ThreadTrial(**t) for t in entry["trials"])
            measured = float(entry.get("measured_unix", 0.0))  # 0: saved before ages were kept
            return ThreadTuning(
                int(entry["threads"]),
                trials,
                seconds=float(entry["seconds"]),
                cached=True,
                measured_unix=measured,
            )
        except (KeyError, TypeError, ValueError) as err:
            log.warning("autotune_cache_entry_ignored", path=str(self.path), error=str(err))
            return None

    def put(self, key: str, tuning: ThreadTuning) -> None:
        """Save `tuning` under `key` (not a contended one: it would be wrong at every later start)."""
        if tuning.contended:
            log.warning("autotune_not_cached", reason="contended trials", threads=tuning.threads)
            return
        trials = [asdict(t) for t in tuning.trials]
        entry = {"threads": tuning.threads, "trials": trials, "seconds": tuning.seconds}
        self._map.put(key, {**entry, "measured_unix": tuning.measured_unix})


class CostsCache:
    """Saved forward costs (`forward_costs.json`): seconds per forward length, as measured at load."""

    def __init__(self, data_dir: Path) -> None:
        self._map = JsonMap(data_dir / COSTS_FILE)
        self.path = self._map.path

    def get(self, key: str) -> ForwardCosts | None:
        """The costs saved for `key` (None when missing, damaged, or without a decode step's time)."""
        entry = self._map.read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            seconds = {int(n): float(s) for n, s in entry.items()}
        except (TypeError, ValueError) as err:
            log.warning("forward_costs_entry_ignored", path=str(self.path), error=str(err))
            return None
        if seconds.get(1, 0.0) <= 0.0 or any(s <= 0.0 for s in seconds.values()):
            return None
        return ForwardCosts.fixed(seconds)

    def put(self, key: str, costs: ForwardCosts) -> None:
        """Save the median seconds of each measured forward length under `key`."""
        self._map.put(key, {str(n): s for n, s in sorted(costs.seconds.items())})
