"""Deploy: push an artifact to a device daemon, load it, run a short generation, report the numbers.

`deploy()` is a plain job function (`Progress` in, result dict out) so the HostService can run
it under its JobManager and stream the progress as JobEvents.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgellm.client.client import DaemonClient
from edgellm.client.push import Pusher, PushProgress
from edgellm.v1 import device_pb2

Progress = Callable[[float, str], None]
PUSH_SHARE = 0.8  # fraction of the job's progress bar the push takes


def push_message(p: PushProgress) -> str:
    """'push 12.3/98.0 MB, 85.1 MB/s, ETA 1 s' for a progress event."""
    eta = f"{p.eta_seconds:.0f} s" if p.eta_seconds >= 0 else "?"
    return (
        f"push {p.bytes_done / 1e6:.1f}/{p.bytes_total / 1e6:.1f} MB, "
        f"{p.bytes_per_second / 1e6:.1f} MB/s, ETA {eta}"
    )


def deploy(
    artifact_dir: Path,
    target: str,
    progress: Progress,
    prompt: str = "Write one sentence about the sea.",
    max_new_tokens: int = 32,
) -> dict[str, Any]:
    """Push (resumable), load (admission-checked, warmed up), generate; return device-measured numbers."""
    with DaemonClient(target) as client:
        metadata = tuple(getattr(client, "metadata", None) or ())
        pusher = Pusher(
            client.channel,
            artifact_dir,
            on_progress=lambda p: progress(
                PUSH_SHARE * p.bytes_done / max(p.bytes_total, 1), push_message(p)
            ),
            metadata=metadata,
        )
        progress(0.0, f"push {pusher.total / 1e6:.1f} MB to {target}")
        report = pusher.run()
        progress(PUSH_SHARE, "loading the model on the device")
        loaded = client.stub.LoadModel(
            device_pb2.LoadModelRequest(model=report.artifact_id), metadata=metadata
        )
        progress(0.9, f"loaded in {loaded.load_ms:.0f} ms (warm-up {loaded.warmup_ms:.0f} ms); generating")
        out = client.generate(prompt=prompt, max_new_tokens=max_new_tokens)
    stats = out.stats
    result = {
        "artifact_id": report.artifact_id,
        "bytes_total": report.bytes_total,
        "bytes_sent": report.bytes_sent,
        "bytes_skipped": report.bytes_skipped,
        "push_seconds": round(report.seconds, 3),
        "push_mb_per_second": round(report.mb_per_second, 1),
        "load_ms": round(loaded.load_ms, 1),
        "warmup_ms": round(loaded.warmup_ms, 1),
        "ttft_ms": round(stats.ttft_ms, 1) if stats else None,
        "decode_tokens_per_second": round(stats.decode_tokens_per_second, 1) if stats else None,
        "completion_tokens": stats.completion_tokens if stats else 0,
        "sample": out.text,
    }
    progress(1.0, "deployed")
    return result
