"""`edgellm telemetry`: one sample, a live view, JSON lines to a file, or a plot of a recording."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import grpc

from edgellm.client.client import DaemonClient
from edgellm.client.connect_args import add_target, client_from
from edgellm.client.failures import INTERRUPTED, OK
from edgellm.client.jsonout import message_dict
from edgellm.client.plot import Trace, plot_path, plot_traces
from edgellm.common.argtypes import int_in, non_negative_int
from edgellm.common.errors import FailedPrecondition, InvalidArgument
from edgellm.v1 import device_pb2

PLOT_SAMPLES = 60  # --plot without --record or --samples: a minute at the default interval
CLEAR = "\x1b[2J\x1b[H"  # ANSI: clear the screen, cursor home (only ever written to a terminal)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `telemetry` subcommand."""
    p = sub.add_parser("telemetry", help="temperatures, frequencies, memory, speed and governor state")
    add_target(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--watch", action="store_true", help="live view until Ctrl-C (or --samples)")
    mode.add_argument("--json", action="store_true", help="print samples as JSON (one, or --samples N lines)")
    mode.add_argument(
        "--record", type=Path, metavar="FILE", help="append samples as JSON lines until Ctrl-C (or --samples)"
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="draw a PNG: of --from FILE, of what --record wrote, or alone of samples taken until "
        "Ctrl-C (or --samples)",
    )
    p.add_argument(
        "--from", dest="source", type=Path, metavar="FILE", help="JSON lines to plot (no daemon needed)"
    )
    p.add_argument("--interval-ms", type=int_in(50), default=1000, help="time between samples")
    p.add_argument(
        "--samples",
        type=non_negative_int,
        default=None,
        help=f"stop after N samples; 0 = until Ctrl-C (default: {PLOT_SAMPLES} for --plot alone, until "
        "Ctrl-C for --watch and --record, else 1)",
    )
    p.set_defaults(handler=run)


def _khz(values: list[int]) -> str:
    readable = [v for v in values if v > 0]
    return f"{max(readable) / 1e6:.2f}GHz" if readable else "n/a"


def render(s: device_pb2.TelemetrySample) -> str:
    """A compact multi-line view of one sample (n/a for what the phone does not let us read)."""
    g = s.governor
    state = str(device_pb2.EngineState.Name(s.engine_state)).removeprefix("ENGINE_STATE_").lower()

    def temp(has: bool, value: float) -> str:
        return f"{value:5.1f}°C" if has else "   n/a "

    clusters: dict[int, list[int]] = {}
    for c in s.cores:
        clusters.setdefault(c.cluster, []).append(c.cur_khz)
    freqs = "  ".join(f"c{k}:{_khz(v)}" for k, v in sorted(clusters.items())) or "n/a"
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
        f"governor {g.policy}  setpoint {g.setpoint_c:.1f}°C  rung {g.rung} {g.cluster} t{g.threads} "
        f"{g.power} pacing {g.pacing_ms:.1f} ms",
    ]
    if g.last_decision:
        lines.append(f"  last   {g.last_decision}  ({g.last_reason})")
    return "\n".join(lines)


def trace_from_samples(samples: list[dict[str, Any]]) -> Trace:
    """The plot series of samples (dicts as `--json`/`--record` write them)."""
    tr = Trace("device")
    t0: float | None = None
    for d in samples:
        t = float(d.get("unix_time", 0.0))
        t0 = t if t0 is None else t0
        tr.t_s.append(t - t0)
        for key in ("soc_celsius", "skin_celsius", "battery_celsius"):
            tr.temps.setdefault(key.removesuffix("_celsius"), []).append(float(d.get(key, float("nan"))))
        tr.tokens_per_second.append(float(d.get("tokens_per_second", 0.0)))
        gov = d.get("governor", {})
        tr.rung.append(float(gov.get("rung", 0)))
        tr.threads.append(float(gov.get("threads", 0)))
        tr.pacing_ms.append(float(gov.get("pacing_ms", 0.0)))
    return tr


def plot_samples(samples: list[dict[str, Any]], out: Path, title: str) -> None:
    """A PNG of samples: temperatures, tok/s, the governor's rung (and threads), pacing."""
    plot_traces([trace_from_samples(samples)], out, title=title)


def plot_file(source: Path, out: Path) -> None:
    """Plot a JSON-lines recording."""
    lines = source.read_text(encoding="utf-8").splitlines()
    plot_samples([json.loads(line) for line in lines if line.strip()], out, f"telemetry {source.name}")


@dataclass
class Interrupt:
    """Whether Ctrl-C ended the stream (the command then exits 130, as documented, after saving)."""

    happened: bool = False

    def stop(self, call: Any) -> None:
        self.happened = True
        call.cancel()


def _samples(
    client: DaemonClient, interval_ms: int, limit: int, interrupt: Interrupt
) -> Iterator[device_pb2.TelemetrySample]:
    """Samples until `limit` (0 = no limit) or Ctrl-C; the stream is cancelled either way."""
    call = client.stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=interval_ms))
    count = 0
    # Why a handler and not only `except KeyboardInterrupt`: Ctrl-C is how --watch/--record end, and
    # a KeyboardInterrupt raised while the caller writes a sample (outside this generator) escaped as
    # exit 130. Cancelling the call makes Ctrl-C end the stream wherever it lands.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda _sig, _frame: interrupt.stop(call))
    try:
        for sample in call:
            count += 1
            yield sample
            if limit and count >= limit:
                return
    except KeyboardInterrupt:
        interrupt.happened = True
        return
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.CANCELLED:
            raise
    finally:
        call.cancel()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


class _Sink:
    """Where each sample goes in the chosen mode: kept for a record/plot, JSON, a live view, or text."""

    def __init__(self, ns: argparse.Namespace, limit: int, record: TextIO | None) -> None:
        self.recording = ns.record is not None or ns.plot is not None
        self.kept: list[dict[str, Any]] = []
        self._ns = ns
        self._limit = limit
        self._record = record
        self._out: TextIO = sys.stdout
        self._tty = self._out.isatty()

    def write(self, s: device_pb2.TelemetrySample) -> None:
        """Handle one sample."""
        d = message_dict(s)
        if self.recording:
            self.kept.append(d)
            if self._record is not None:
                self._record.write(json.dumps(d) + "\n")
                self._record.flush()
            if sys.stderr.isatty():
                sys.stderr.write(f"\rrecorded {len(self.kept)} samples")
        elif self._ns.json:
            self._out.write(json.dumps(d, indent=2 if self._limit == 1 else None) + "\n")
        elif self._ns.watch:
            # On a terminal redraw in place; into a pipe or file, samples follow each other.
            self._out.write((CLEAR if self._tty else "") + render(s) + ("\n" if self._tty else "\n\n"))
        else:
            self._out.write(render(s) + "\n")
        self._out.flush()


def run(ns: argparse.Namespace) -> int:
    """Stream samples in the chosen mode."""
    if ns.plot is not None:
        ns.plot = plot_path(ns.plot)  # before any sampling: a recording that cannot be drawn is time lost
    if ns.source is not None:
        return _plot_recording(ns)
    recording = ns.record is not None or ns.plot is not None
    interrupt = Interrupt()
    kept, target = _stream(ns, recording, interrupt)
    if recording and sys.stderr.isatty():
        sys.stderr.write("\n")
    if ns.record is not None:
        sys.stdout.write(f"recorded {len(kept)} samples to {ns.record}\n")
    if ns.plot is not None:
        _plot_kept(kept, ns.plot, f"telemetry {ns.record.name if ns.record else target}")
    return INTERRUPTED if interrupt.happened else OK


def _plot_recording(ns: argparse.Namespace) -> int:
    """--from FILE --plot PNG: draw a recording, reading nothing from the daemon."""
    if ns.plot is None:
        raise InvalidArgument("--from FILE needs --plot PNG (the image to draw it into)")
    plot_file(ns.source, ns.plot)
    sys.stdout.write(f"wrote {ns.plot}\n")
    return 0


def _stream(
    ns: argparse.Namespace, recording: bool, interrupt: Interrupt
) -> tuple[list[dict[str, Any]], str]:
    """Read samples into the chosen sink until the limit (or Ctrl-C); the samples kept and the target."""
    limit = sample_limit(ns)
    with contextlib.ExitStack() as stack:
        record = stack.enter_context(ns.record.open("a", encoding="utf-8")) if ns.record else None
        client = stack.enter_context(client_from(ns))
        sink = _Sink(ns, limit, record)
        if recording:
            sys.stderr.write(sampling_note(limit, ns.interval_ms, client.target))
        for s in _samples(client, ns.interval_ms, limit, interrupt):
            sink.write(s)
    return sink.kept, client.target


def sample_limit(ns: argparse.Namespace) -> int:
    """How many samples to read (0 = until Ctrl-C): --samples, else PLOT_SAMPLES for --plot alone,
    until Ctrl-C for --watch/--record, else one."""
    if ns.samples is None and ns.plot is not None and ns.record is None:
        return PLOT_SAMPLES
    if ns.samples:
        return int(ns.samples)
    return 0 if (ns.watch or ns.record is not None or ns.plot is not None) else 1


def sampling_note(limit: int, interval_ms: int, target: str) -> str:
    """The stderr line that says a recording is under way, how long it takes and how to end it."""
    if not limit:
        return f"sampling {target} every {interval_ms} ms until Ctrl-C\n"
    seconds = limit * interval_ms / 1000
    return (
        f"sampling {target}: {limit} samples every {interval_ms} ms (about {seconds:.0f} s; "
        "Ctrl-C stops early and keeps what was read)\n"
    )


def _plot_kept(kept: list[dict[str, Any]], png: Path, title: str) -> None:
    if not kept:
        raise FailedPrecondition("no samples to plot: the stream ended before the first one")
    plot_samples(kept, png, title)
    sys.stdout.write(f"wrote {png}\n")
