"""`edgellm push|models|load|unload|rm`: artifacts and models on the device."""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata

from edgellm.client.client import DaemonClient
from edgellm.client.connect_args import add_target, client_from
from edgellm.client.jsonout import message_dict
from edgellm.common.allocator import tune_for_streaming
from edgellm.common.argtypes import float_in
from edgellm.common.errors import InvalidArgument
from edgellm.common.paths import resolve_artifact
from edgellm.common.pusher import CHUNK_BYTES, Pusher, PushProgress
from edgellm.v1 import device_pb2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the artifact and model subcommands."""
    p = sub.add_parser("push", help="push an artifact directory to the device (resumable)")
    add_target(p)
    p.add_argument("artifact_dir", help="artifact directory on this machine, or 'default' (the cached one)")
    p.add_argument(
        "--chunk-mib", type=float_in(1 / 64, 16), default=CHUNK_BYTES / (1 << 20), help="chunk size in MiB"
    )
    p.add_argument("--load", action="store_true", help="load the model after the push")
    p.set_defaults(handler=run_push)
    p = sub.add_parser("models", help="list artifacts installed on the device ('*' = loaded)")
    add_target(p)
    p.add_argument("--json", action="store_true", help="print the list as JSON (without manifests)")
    p.set_defaults(handler=run_models)
    p = sub.add_parser("load", help="load a model (artifact id, name or device directory)")
    add_target(p)
    p.add_argument("model", help="artifact id (or a unique prefix), name, or a directory on the device")
    p.set_defaults(handler=run_load)
    p = sub.add_parser("unload", help="unload the model")
    add_target(p)
    p.set_defaults(handler=run_unload)
    p = sub.add_parser("rm", help="delete an artifact from the device")
    add_target(p)
    p.add_argument("artifact", help="artifact id (or a unique prefix) or name")
    p.set_defaults(handler=run_rm)


def run_push(ns: argparse.Namespace) -> int:
    """Push with a progress bar (bytes, MB/s, ETA), then optionally load."""
    from tqdm import tqdm

    tune_for_streaming()  # the push streams 1 MiB buffers (src/edgellm/common/allocator.py)
    artifact = resolve_artifact(ns.artifact_dir)  # a wrong path is said first, before any connection
    with client_from(ns) as client:
        try:  # every call on client.channel carries the token (edgellm.common.channel)
            pusher = Pusher(client.channel, artifact, int(ns.chunk_mib * (1 << 20)))
        except ValueError as err:  # load_local: a file missing, a link, a wrong size
            raise InvalidArgument(f"{artifact} cannot be pushed: {err}") from err
        # No bar into a pipe or a log (it wrote ~170 \r updates there); the summary line below stays.
        quiet = not sys.stderr.isatty()
        with tqdm(
            total=pusher.total, unit="B", unit_scale=True, unit_divisor=1000, desc="push", disable=quiet
        ) as bar:

            def show(p: PushProgress) -> None:
                bar.n = p.bytes_done
                bar.refresh()

            pusher.on_progress = show
            report = pusher.run()
            bar.n = pusher.total
        sys.stdout.write(
            f"{report.artifact_id[:12]}: {report.bytes_total / 1e6:.1f} MB, "
            f"sent {report.bytes_sent / 1e6:.1f} MB "
            f"({report.bytes_skipped / 1e6:.1f} MB already there) in {report.seconds:.1f} s, "
            f"{report.mb_per_second:.1f} MB/s, {report.attempts} attempt(s)\n"
        )
        if ns.load:
            return _load(client, report.artifact_id)
    return 0


def terminal_safe(text: str) -> str:
    """TEXT with control and format characters escaped (\\x1b, \\u202e), so a name cannot drive the terminal.

    Why: a daemon before finding L5's fix (or any peer holding the token) may list a name with ANSI
    escapes or bidi overrides; written raw, they could clear the screen or disguise another model.
    """
    return "".join(
        c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in ("Cc", "Cf") else c
        for c in text
    )


def run_models(ns: argparse.Namespace) -> int:
    """One line per installed artifact; '*' marks the loaded one."""
    with client_from(ns) as client:
        resp = client.stub.ListModels(device_pb2.ListModelsRequest(), timeout=30)
    if ns.json:
        rows = []
        for m in resp.models:
            row = message_dict(m)
            row.pop("manifest_json", None)  # the manifest's file list is in `files` already
            rows.append(row)
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    for m in resp.models:
        mark = "*" if m.loaded else " "
        sys.stdout.write(
            f"{mark} {terminal_safe(m.artifact_id[:12])}  {terminal_safe(m.name):<24} "
            f"{terminal_safe(m.quantization):<10} {m.size_bytes / 1e6:8.1f} MB\n"
        )
    if not resp.models:
        sys.stdout.write("no artifacts on the device (push one with `edgellm push DIR`)\n")
    return 0


def _load(client: DaemonClient, model: str) -> int:
    r = client.stub.LoadModel(device_pb2.LoadModelRequest(model=model))
    sys.stdout.write(
        f"loaded {terminal_safe(r.model.name)} ({terminal_safe(r.model.artifact_id[:12])}): "
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
        client.stub.UnloadModel(device_pb2.UnloadModelRequest())
    return 0


def run_rm(ns: argparse.Namespace) -> int:
    """Delete an artifact (the loaded one is refused)."""
    with client_from(ns) as client:
        client.stub.DeleteArtifact(device_pb2.DeleteArtifactRequest(artifact_id=ns.artifact))
    return 0
