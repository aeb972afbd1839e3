"""Deploy: push an artifact to a device daemon, load it, run a short generation, report the numbers.

`deploy()` is a plain job function (`Progress` in, a typed `DeployResult` out) so the HostService
can run it under its JobManager and stream the progress as JobEvents. It speaks to the daemon
through `edgellm.common` (channel, pusher) and the generated stubs, never through the client CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from edgellm.common.channel import open_channel
from edgellm.common.pusher import Pusher, PushProgress
from edgellm.common.targets import resolve_target
from edgellm.v1 import common_pb2, device_pb2, device_pb2_grpc, host_pb2

Progress = Callable[[float, str], None]
PUSH_SHARE = 0.8  # fraction of the job's progress bar the push takes


def push_message(p: PushProgress) -> str:
    """'push 12.3/98.0 MB, 85.1 MB/s, ETA 1 s' for a progress event."""
    eta = f"{p.eta_seconds:.0f} s" if p.eta_seconds >= 0 else "?"
    return (
        f"push {p.bytes_done / 1e6:.1f}/{p.bytes_total / 1e6:.1f} MB, "
        f"{p.bytes_per_second / 1e6:.1f} MB/s, ETA {eta}"
    )


def trial_request(prompt: str, max_new_tokens: int, chat: bool) -> device_pb2.GenerateRequest:
    """The trial's greedy request: the prompt as a user message for a model with a chat template.

    Why: a chat-tuned model ends a raw completion at once, and the trial then reported 0 tokens at
    0 tok/s (SmolLM2-135M-Instruct, "Write one sentence about the sea.").
    """
    if chat:
        messages = [common_pb2.ChatMessage(role="user", content=prompt)]
        return device_pb2.GenerateRequest(messages=messages, max_new_tokens=max_new_tokens)
    return device_pb2.GenerateRequest(prompt=prompt, max_new_tokens=max_new_tokens)


def try_generation(
    stub: device_pb2_grpc.DeviceDaemonStub, prompt: str, max_new_tokens: int, chat: bool = False
) -> tuple[str, device_pb2.GenerateStats | None]:
    """The text of one greedy generation and the device's stats for it."""
    text, stats = "", None
    for response in stub.Generate(trial_request(prompt, max_new_tokens, chat)):
        text += response.text
        if response.finish_reason:
            stats = response.stats
    return text, stats


def deploy(
    artifact_dir: Path,
    target: str,
    progress: Progress,
    prompt: str = "Write one sentence about the sea.",
    max_new_tokens: int = 32,
) -> host_pb2.DeployResult:
    """Push (resumable), load (admission-checked, warmed up), generate; return device-measured numbers."""
    target = resolve_target(target)
    with open_channel(target) as channel:  # the token and TLS trust a client would find
        stub = device_pb2_grpc.DeviceDaemonStub(channel)
        pusher = Pusher(
            channel,
            artifact_dir,
            on_progress=lambda p: progress(
                PUSH_SHARE * p.bytes_done / max(p.bytes_total, 1), push_message(p)
            ),
        )
        progress(0.0, f"push {pusher.total / 1e6:.1f} MB to {target}")
        report = pusher.run()
        progress(PUSH_SHARE, "loading the model on the device")
        loaded = stub.LoadModel(device_pb2.LoadModelRequest(model=report.artifact_id))
        progress(0.9, f"loaded in {loaded.load_ms:.0f} ms (warm-up {loaded.warmup_ms:.0f} ms); generating")
        sample, stats = try_generation(stub, prompt, max_new_tokens, loaded.model.chat_tuned)
    result = host_pb2.DeployResult(
        artifact_id=report.artifact_id,
        bytes_total=report.bytes_total,
        bytes_sent=report.bytes_sent,
        bytes_skipped=report.bytes_skipped,
        push_seconds=round(report.seconds, 3),
        push_mb_per_second=round(report.mb_per_second, 1),
        load_ms=round(loaded.load_ms, 1),
        warmup_ms=round(loaded.warmup_ms, 1),
        sample=sample,
    )
    if stats is not None:
        result.ttft_ms = round(stats.ttft_ms, 1)
        result.decode_tokens_per_second = round(stats.decode_tokens_per_second, 1)
        result.completion_tokens = stats.completion_tokens
    progress(1.0, "deployed")
    return result
