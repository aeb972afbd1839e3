"""A fuzz target around a DaemonProcess serving the default model."""

from __future__ import annotations

from pathlib import Path

from edgellm.common.channel import ChannelSecurity, open_channel
from edgellm.common.pusher import Pusher
from edgellm.v1 import device_pb2, device_pb2_grpc
from tests.reliability.daemon_proc import DaemonProcess
from tests.reliability.hostile import FuzzTarget


def daemon_for_fuzz(artifact: Path, data_dir: Path) -> DaemonProcess:
    """A daemon as a user starts it (token on), the model loaded at start, one thread (no autotune)."""
    return DaemonProcess(data_dir, ("--model", str(artifact), "--threads", "1", "--queue-size", "4"))


def fuzz_target(daemon: DaemonProcess, artifact: Path) -> FuzzTarget:
    """Channels with the daemon's token, with none and with a wrong one; restore reloads ARTIFACT.

    ARTIFACT is pushed first, so the store holds a real artifact (to list, delete, load) and a
    hostile UnloadModel can be undone with LoadModel of its id.
    """
    artifact_id = Pusher(daemon.channel(), artifact).run().artifact_id
    channels = {
        "token": daemon.channel(),
        "wrong": daemon.channel("not-the-token"),
        # No token, over TLS as any client must (a plaintext channel would not even reach the RPCs).
        "none": open_channel(daemon.target, ChannelSecurity(None, tls=daemon.tls)),
    }

    def restore() -> None:
        stub = device_pb2_grpc.DeviceDaemonStub(channels["token"])
        stub.LoadModel(device_pb2.LoadModelRequest(model=artifact_id), timeout=120)

    return FuzzTarget(channels, daemon.health, restore, daemon.alive)
