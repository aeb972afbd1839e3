"""The load-time autotune's picks, kept per (artifact, CPU set) so a restart does not measure again.

`<data_dir>/autotune.json` maps a key (the artifact id, the CPUs this process may run on, the CPU
model and MNN version) to the `ThreadTuning` measured there. Another phone, another affinity mask
(Termux under a different cpuset), another artifact or another MNN gives another key, so it is
measured afresh. A damaged file is ignored (and replaced on the next save): a cache miss only
costs the few seconds of measuring.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from edgellm.common.logs import get_logger
from edgellm.device.core.autotune import ThreadTrial, ThreadTuning

log = get_logger(__name__)

FILE = "autotune.json"


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


class TuningCache:
    """Saved autotune results in one JSON file under the daemon's data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE

    def get(self, key: str) -> ThreadTuning | None:
        """The tuning saved for `key`, if any (None when the file is missing or damaged)."""
        entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            trials = tuple(ThreadTrial(**t) for t in entry["trials"])
            return ThreadTuning(int(entry["threads"]), trials, seconds=float(entry["seconds"]), cached=True)
        except (KeyError, TypeError, ValueError) as err:
            log.warning("autotune_cache_entry_ignored", path=str(self.path), error=str(err))
            return None

    def put(self, key: str, tuning: ThreadTuning) -> None:
        """Save `tuning` under `key` (atomically: a reader sees the old file or the new one)."""
        data = self._read()
        data[key] = {
            "threads": tuning.threads,
            "trials": [asdict(t) for t in tuning.trials],
            "seconds": tuning.seconds,
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{FILE}.tmp-{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(self.path)
        except OSError as err:  # a read-only data dir costs a re-measure at the next start, nothing more
            log.warning("autotune_cache_not_saved", path=str(self.path), error=str(err))

    def _read(self) -> dict[str, object]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            log.warning("autotune_cache_unreadable", path=str(self.path), error=str(err))
            return {}
        return data if isinstance(data, dict) else {}
