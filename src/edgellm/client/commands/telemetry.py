"""`edgellm telemetry`: one sample, a live view, JSON lines to a file, or a plot of a recording."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from edgellm.client.commands.common_args import add_target, client_from, report_rpc_error
from edgellm.v1 import device_pb2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `telemetry` subcommand."""
    p = sub.add_parser("telemetry", help="temperatures, frequencies, memory, speed and governor state")
    add_target(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--watch", action="store_true", help="live terminal view until Ctrl-C")
    mode.add_argument("--json", action="store_true", help="print one sample as JSON")
    mode.add_argument("--record", type=Path, metavar="FILE", help="append samples as JSON lines until Ctrl-C")
    p.add_argument(
        "--plot", type=Path, metavar="PNG", help="draw a recording (--from FILE) or what --record wrote"
    )
    p.add_argument(
        "--from", dest="source", type=Path, metavar="FILE", help="JSON lines to plot (no daemon needed)"
    )
    p.add_argument("--interval-ms", type=int, default=1000)
    p.add_argument("--samples", type=int, default=0, help="stop after N samples (0 = until Ctrl-C)")
    p.set_defaults(handler=run)


def _dict(s: device_pb2.TelemetrySample) -> dict[str, Any]:
    d: dict[str, Any] = MessageToDict(s, preserving_proto_field_name=True)
    return d


def render(s: device_pb2.TelemetrySample) -> str:
    """A compact multi-line view of one sample."""
    g = s.governor
    state = str(device_pb2.EngineState.Name(s.engine_state)).removeprefix("ENGINE_STATE_").lower()

    def temp(has: bool, value: float) -> str:
        return f"{value:5.1f}°C" if has else "   n/a "

    clusters: dict[int, list[int]] = {}
    for c in s.cores:
        clusters.setdefault(c.cluster, []).append(c.cur_khz)
    freqs = "  ".join(f"c{k}:{max(v) / 1e6:.2f}GHz" for k, v in sorted(clusters.items())) or "n/a"
    lines = [
        time.strftime("%H:%M:%S", time.localtime(s.unix_time)),
        f"temp    soc {temp(s.HasField('soc_celsius'), s.soc_celsius)}  "
        f"skin {temp(s.HasField('skin_celsius'), s.skin_celsius)}  "
        f"battery {temp(s.HasField('battery_celsius'), s.battery_celsius)}",
        f"cpu     {freqs}",
        f"memory  avail {s.mem_available_bytes / 2**20:,.0f} MiB / {s.mem_total_bytes / 2**20:,.0f} MiB   "
        f"rss {s.rss_bytes / 2**20:,.0f} MiB (peak {s.rss_peak_bytes / 2**20:,.0f})   "
        f"cpu {s.process_cpu_seconds:.1f} s",
        f"engine  {state}  {s.tokens_per_second:.1f} tok/s  last TTFT {s.last_ttft_ms:.0f} ms",
        f"governor {g.policy}  setpoint {g.setpoint_c:.1f}°C  {g.cluster} t{g.threads} {g.power} "
        f"pacing {g.pacing_ms:.1f} ms",
    ]
    if g.last_decision:
        lines.append(f"  last   {g.last_decision}  ({g.last_reason})")
    return "\n".join(lines)


def plot_file(source: Path, out: Path) -> None:
    """Plot a JSON-lines recording."""
    from edgellm.client.plot import Trace, plot_traces

    tr = Trace("device")
    t0: float | None = None
    for line in source.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        t = float(d.get("unix_time", 0.0))
        t0 = t if t0 is None else t0
        tr.t_s.append(t - t0)
        for key in ("soc_celsius", "skin_celsius", "battery_celsius"):
            tr.temps.setdefault(key.removesuffix("_celsius"), []).append(float(d.get(key, float("nan"))))
        tr.tokens_per_second.append(float(d.get("tokens_per_second", 0.0)))
        gov = d.get("governor", {})
        tr.threads.append(float(gov.get("threads", 0)))
        tr.pacing_ms.append(float(gov.get("pacing_ms", 0.0)))
    plot_traces([tr], out, title=f"telemetry {source.name}")


def run(ns: argparse.Namespace) -> int:
    """Stream samples in the chosen mode."""
    if ns.plot and ns.source:
        plot_file(ns.source, ns.plot)
        return 0
    single = not (ns.watch or ns.record)
    limit = 1 if single else ns.samples
    count = 0
    out = ns.record.open("a") if ns.record else None
    try:
        with client_from(ns) as client:
            call = client.stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=ns.interval_ms))
            try:
                for s in call:
                    count += 1
                    if out is not None:
                        out.write(json.dumps(_dict(s)) + "\n")
                        out.flush()
                        sys.stdout.write(f"\rrecorded {count} samples")
                    elif ns.json:
                        sys.stdout.write(json.dumps(_dict(s), indent=2) + "\n")
                    elif ns.watch:
                        sys.stdout.write("\x1b[2J\x1b[H" + render(s) + "\n")
                    else:
                        sys.stdout.write(render(s) + "\n")
                    sys.stdout.flush()
                    if limit and count >= limit:
                        break
            except KeyboardInterrupt:
                pass
            finally:
                call.cancel()
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED:
            return report_rpc_error(err)
    finally:
        if out is not None:
            out.close()
            sys.stdout.write("\n")
    if ns.plot and ns.record:
        plot_file(ns.record, ns.plot)
    return 0
