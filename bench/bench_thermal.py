"""Thermal benchmark: 30 simulated minutes per shipped profile, governor on vs off, plus a plot.

Also (with --artifact) measures on the real engine that a 1 Hz telemetry stream does not slow
decode. Usage:
    python bench/bench_thermal.py [--minutes 30] [--plot docs/governor_thermal.png] [--json]
                                  [--artifact .cache/artifacts/default]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from edgellm.client.plot import Trace, plot_traces
from edgellm.device.virtual_phone.profile import list_profiles, load_profile
from edgellm.device.virtual_phone.simulate import SimResult, simulate


def trace(result: SimResult) -> Trace:
    """Plot series of one simulation."""
    tr = Trace(f"{result.profile} governor {result.governor}")
    for s in result.samples[::5]:
        tr.t_s.append(s.t_s)
        tr.temps.setdefault("skin", []).append(s.skin_c)
        tr.temps.setdefault("die", []).append(s.die_c)
        tr.tokens_per_second.append(s.tokens_per_second)
        tr.rung.append(float(s.rung))
        tr.pacing_ms.append(s.pacing_ms)
    return tr


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the summaries."""
    cols = [
        ("profile", "profile"),
        ("governor", "governor"),
        ("mean_tokens_per_second", "mean tok/s"),
        ("decay_10min", "decay 10 min"),
        ("decay_30min", "decay 30 min"),
        ("peak_skin_c", "peak skin °C"),
        ("peak_die_c", "peak die °C"),
        ("throttled_seconds", "throttled s"),
        ("p95_ttft_ratio", "p95 TTFT / cold"),
        ("ttft_ratio_10min", "TTFT@10 min / cold"),
    ]
    lines = ["| " + " | ".join(c[1] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for key, _ in cols:
            v = r[key]
            cells.append(f"{v:.3f}" if isinstance(v, float) and key.startswith("decay") else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def telemetry_overhead(artifact: Path, tokens: int, reps: int) -> dict[str, float]:
    """Decode tok/s of the real daemon with and without a 1 Hz StreamTelemetry client."""
    import grpc

    from edgellm.device.config import DaemonConfig
    from edgellm.device.rpc.server import start_server
    from edgellm.v1 import device_pb2, device_pb2_grpc

    running = await start_server(
        DaemonConfig(port=0, model=artifact, data_dir=Path("/tmp/edgellm-bench-thermal"))
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub: Any = device_pb2_grpc.DeviceDaemonStub(ch)
            req = device_pb2.GenerateRequest(prompt="1, 2, 3, 4, 5, 6, 7, 8,", max_new_tokens=tokens)

            async def once() -> float:
                last = [r async for r in stub.Generate(req)][-1]
                return float(last.stats.decode_tokens_per_second)

            await once()  # warm
            plain, watched = [], []
            for _ in range(reps):  # interleaved, so drift from other load hits both alike
                plain.append(await once())
                call = stub.StreamTelemetry(device_pb2.StreamTelemetryRequest(interval_ms=1000))

                async def drain(c: Any = call) -> None:
                    async for _ in c:
                        pass

                task = asyncio.create_task(drain())
                watched.append(await once())
                call.cancel()
                task.cancel()
    finally:
        await running.stop(0)
    return {
        "decode_tps_without_telemetry": statistics.median(plain),
        "decode_tps_with_1hz_telemetry": statistics.median(watched),
        "ratio": statistics.median(watched) / statistics.median(plain),
    }


def main() -> int:
    """Run every shipped profile on and off; print the table; plot; optionally the overhead check."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--artifact", type=Path, default=None, help="also measure 1 Hz telemetry overhead")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ns = ap.parse_args()
    results = [simulate(load_profile(n), ns.minutes, gov) for n in list_profiles() for gov in (False, True)]
    rows = [r.summary() for r in results]
    for row in rows:
        row.pop("tokens_per_second_by_minute")
    verdicts = {}
    for name in list_profiles():
        off = next(r for r in results if r.profile == name and r.governor == "off")
        on = next(r for r in results if r.profile == name and r.governor == "on")
        verdicts[name] = {
            "mean_ratio": round(on.mean_tokens_per_second / off.mean_tokens_per_second, 3),
            "decay_10min_ok": on.decay_10min is not None and on.decay_10min <= 0.10,
            "throughput_ok": on.mean_tokens_per_second >= 1.2 * off.mean_tokens_per_second,
            "no_throttling": on.throttled_seconds == 0,
            "ttft_ok": on.p95_ttft_ratio <= 1.5,
        }
    out: dict[str, Any] = {"runs": rows, "acceptance": verdicts}
    if ns.artifact is not None:
        out["telemetry_overhead"] = asyncio.run(telemetry_overhead(ns.artifact, ns.tokens, ns.reps))
    if ns.plot is not None:
        ns.plot.parent.mkdir(parents=True, exist_ok=True)
        plot_traces(
            [trace(r) for r in results], ns.plot, title=f"{ns.minutes:.0f} simulated minutes per profile"
        )
    if ns.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(table(rows) + "\n\n" + json.dumps(verdicts, indent=2) + "\n")
        if "telemetry_overhead" in out:
            sys.stdout.write(json.dumps(out["telemetry_overhead"], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
