"""`edgellm push|models|load|unload|rm`: artifacts and models on the device."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc

from edgellm.client.client import DaemonClient
from edgellm.client.commands.common_args import add_target, client_from, report_rpc_error
from edgellm.client.push import CHUNK_BYTES, Pusher, PushProgress
from edgellm.common.allocator import tune_for_streaming
from edgellm.v1 import device_pb2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the artifact and model subcommands."""
    p = sub.add_parser("push", help="push an artifact directory to the device (resumable)")
    add_target(p)
    p.add_argument("artifact_dir", type=Path)
    p.add_argument("--chunk-mib", type=float, default=CHUNK_BYTES / (1 << 20), help="chunk size (default 1)")
    p.add_argument("--load", action="store_true", help="load the model after the push")
    p.set_defaults(handler=run_push)
    p = sub.add_parser("models", help="list artifacts installed on the device")
    add_target(p)
    p.set_defaults(handler=run_models)
    p = sub.add_parser("load", help="load a model (artifact id, name or device directory)")
    add_target(p)
    p.add_argument("model")
    p.set_defaults(handler=run_load)
    p = sub.add_parser("unload", help="unload the model")
    add_target(p)
    p.set_defaults(handler=run_unload)
    p = sub.add_parser("rm", help="delete an artifact from the device")
    add_target(p)
    p.add_argument("artifact")
    p.set_defaults(handler=run_rm)


def _metadata(client: DaemonClient) -> tuple[tuple[str, str], ...]:
    return tuple(getattr(client, "metadata", None) or ())


def run_push(ns: argparse.Namespace) -> int:
    """Push with a progress bar (bytes, MB/s, ETA), then optionally load."""
    from tqdm import tqdm

    tune_for_streaming()  # the push streams 1 MiB buffers (src/edgellm/common/allocator.py)
    with client_from(ns) as client:
        try:
            pusher = Pusher(
                client.channel, ns.artifact_dir, int(ns.chunk_mib * (1 << 20)), metadata=_metadata(client)
            )
        except (OSError, ValueError) as err:
            sys.stderr.write(f"edgellm: {err}\n")
            return 2
        bar = tqdm(total=pusher.total, unit="B", unit_scale=True, unit_divisor=1000, desc="push")

        def show(p: PushProgress) -> None:
            bar.n = p.bytes_done
            bar.refresh()

        pusher.on_progress = show
        try:
            report = pusher.run()
        except grpc.RpcError as err:
            bar.close()
            return report_rpc_error(err)
        bar.n = pusher.total
        bar.close()
        sys.stdout.write(
            f"{report.artifact_id[:12]}: {report.bytes_total / 1e6:.1f} MB, "
            f"sent {report.bytes_sent / 1e6:.1f} MB "
            f"({report.bytes_skipped / 1e6:.1f} MB already there) in {report.seconds:.1f} s, "
            f"{report.mb_per_second:.1f} MB/s, {report.attempts} attempt(s)\n"
        )
        if ns.load:
            return _load(client, report.artifact_id)
    return 0


def run_models(ns: argparse.Namespace) -> int:
    """One line per installed artifact; '*' marks the loaded one."""
    with client_from(ns) as client:
        try:
            resp = client.stub.ListModels(
                device_pb2.ListModelsRequest(), metadata=_metadata(client), timeout=30
            )
        except grpc.RpcError as err:
            return report_rpc_error(err)
    for m in resp.models:
        mark = "*" if m.loaded else " "
        sys.stdout.write(
            f"{mark} {m.artifact_id[:12]}  {m.name:<24} {m.quantization:<10} {m.size_bytes / 1e6:8.1f} MB\n"
        )
    if not resp.models:
        sys.stdout.write("no artifacts on the device (push one with `edgellm push DIR`)\n")
    return 0


def _load(client: DaemonClient, model: str) -> int:
    try:
        r = client.stub.LoadModel(device_pb2.LoadModelRequest(model=model), metadata=_metadata(client))
    except grpc.RpcError as err:
        return report_rpc_error(err)
    sys.stdout.write(
        f"loaded {r.model.name} ({r.model.artifact_id[:12]}): "
        f"load {r.load_ms:.0f} ms, warm-up {r.warmup_ms:.0f} ms\n"
    )
    return 0


def run_load(ns: argparse.Namespace) -> int:
    """Load a model and print load and warm-up times."""
    with client_from(ns) as client:
        return _load(client, ns.model)


def run_unload(ns: argparse.Namespace) -> int:
    """Unload the model."""
    with client_from(ns) as client:
        try:
            client.stub.UnloadModel(device_pb2.UnloadModelRequest(), metadata=_metadata(client))
        except grpc.RpcError as err:
            return report_rpc_error(err)
    return 0


def run_rm(ns: argparse.Namespace) -> int:
    """Delete an artifact (the loaded one is refused)."""
    with client_from(ns) as client:
        try:
            req = device_pb2.DeleteArtifactRequest(artifact_id=ns.artifact)
            client.stub.DeleteArtifact(req, metadata=_metadata(client))
        except grpc.RpcError as err:
            return report_rpc_error(err)
    return 0
