"""The OpenAI gateway vs direct gRPC on the same daemon: client TTFT and decode tok/s, interleaved.

Three processes as a user runs them: `edgellm daemon` (the real default artifact), `edgellm gateway
--target` in front of it, and this client, which alternates one streamed request straight to the
daemon (edgellm's DaemonClient) with one through the gateway (the official `openai` SDK, SSE), so
machine noise hits both paths alike. Greedy, end-of-turn tokens banned (logit_bias -100, the same
on both paths), so every request decodes exactly --new-tokens tokens.

On this 2-core host the gateway shares the cores with MNN's threads; `--gateway-nice 19` models a
gateway on the laptop and the daemon on the phone (it only gets cycles the engine leaves idle).

Usage: python -m bench.bench_gateway --artifact .cache/artifacts/default [--rounds 9]
         [--gateway-nice 19 | --split-cores]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai
from openai.types.chat import ChatCompletionMessageParam

from bench.servers import free_port, serve
from edgellm.client.client import DaemonClient, build_request
from edgellm.common.channel import ChannelSecurity

MESSAGES = (
    ("system", "You are a helpful travel assistant."),
    (
        "user",
        "I am planning a week-long trip through the south of France in early autumn. Which towns "
        "should I visit, how do I travel between them by train, and what should I eat?",
    ),
)
CHAT: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": MESSAGES[0][1]},
    {"role": "user", "content": MESSAGES[1][1]},
]
BAN = -100  # OpenAI's strongest logit_bias: the end-of-turn tokens never win under greedy


Run = tuple[float, float, int, float]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def direct(client: DaemonClient, stop_ids: list[int], new_tokens: int) -> Run:
    """One streamed Generate: (client TTFT ms, client decode tok/s after the first token, completion
    tokens, the device's own TTFT ms)."""
    request = build_request(None, MESSAGES, new_tokens)
    for t in stop_ids:
        request.sampling.logit_bias[t] = BAN
    t0 = time.perf_counter()
    first = last = 0.0
    n = 0
    device_ttft = 0.0
    for r in client.stream(request):
        if r.token_ids:
            now = time.perf_counter()
            n += len(r.token_ids)
            first = first or now
            last = now
        if r.finish_reason:
            device_ttft = r.stats.ttft_ms
    return (first - t0) * 1000, (n - 1) / (last - first), n, device_ttft


def gateway(client: openai.OpenAI, stop_ids: list[int], new_tokens: int) -> Run:
    """One streamed chat completion through the gateway: the same figures, from SSE chunks (the
    device's TTFT from the finishing chunk's llama-server `timings`: queue + prompt ms)."""
    t0 = time.perf_counter()
    first = last = 0.0
    n = 0
    device_ttft = 0.0
    stream = client.chat.completions.create(
        model="",
        messages=CHAT,
        max_tokens=new_tokens,
        temperature=0,
        logit_bias={str(t): BAN for t in stop_ids},
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            first = first or now
            last = now
        if chunk.usage is not None:
            n = chunk.usage.completion_tokens
        timings = (chunk.model_extra or {}).get("timings")
        if timings:
            device_ttft = timings["queue_ms"] + timings["prompt_ms"]
    return (first - t0) * 1000, (n - 1) / (last - first), n, device_ttft


def main() -> int:
    """Run the interleaved comparison and print a JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gateway-nice", type=int, default=0, help="19 ≈ a gateway on another machine")
    ap.add_argument(
        "--split-cores",
        action="store_true",
        help="daemon on the last CPU with one thread; gateway and clients on the others "
        "(models a phone and a laptop: the gateway and the engine never compete for a core)",
    )
    ns = ap.parse_args()
    # Why: SIGTERM would end Python without unwinding, leaving the daemon and gateway processes behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    manifest = json.loads((ns.artifact / "manifest.json").read_text())
    stop_ids = [int(t) for t in manifest["tokenizer"]["stop_token_ids"]]
    dport, gport = free_port(), free_port()
    phone = laptop = None
    if ns.split_cores:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            ap.error("--split-cores needs two CPUs")
        phone, laptop = {cpus[-1]}, set(cpus[:-1])
        ns.threads = 1
        os.sched_setaffinity(0, laptop)
    target = f"127.0.0.1:{dport}"
    edgellm = [sys.executable, "-m", "edgellm"]
    daemon_argv = [*edgellm, "daemon", "--port", str(dport), "--model", str(ns.artifact)]
    daemon_argv += ["--threads", str(ns.threads), "--data-dir", tempfile.mkdtemp(), "--insecure-loopback"]
    # --no-api-key: a loopback benchmark of the serving path; the key check is a constant-time compare.
    gateway_argv = [*edgellm, "gateway", "--target", target, "--port", str(gport), "--no-api-key"]
    # Plaintext on loopback both ways: the serving path, as before TLS (its cost: bench_daemon.py).
    gateway_argv += ["--insecure-loopback"]
    base = f"http://127.0.0.1:{gport}"
    results: dict[str, list[Run]] = {"grpc": [], "gateway": []}
    with (
        serve("daemon", daemon_argv, target, cpus=phone),
        serve(
            "gateway", gateway_argv, f"http://127.0.0.1:{gport}/health", ns.gateway_nice, laptop
        ) as gw_proc,
        DaemonClient(target, security=ChannelSecurity.insecure_loopback()) as grpc_client,
        openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0) as sdk,
    ):
        direct(grpc_client, stop_ids, 8)  # warm both paths (connections, first-request costs)
        gateway(sdk, stop_ids, 8)
        runs = {
            "grpc": lambda: direct(grpc_client, stop_ids, ns.new_tokens),
            "gateway": lambda: gateway(sdk, stop_ids, ns.new_tokens),
        }
        cpu0, wall0 = _cpu_seconds(gw_proc.pid), time.perf_counter()
        for i in range(ns.rounds):  # alternate which path goes first
            for name in ("grpc", "gateway") if i % 2 == 0 else ("gateway", "grpc"):
                results[name].append(runs[name]())
        gateway_cpu_s, wall_s = _cpu_seconds(gw_proc.pid) - cpu0, time.perf_counter() - wall0

    def med(kind: str, i: int) -> float:
        return statistics.median(r[i] for r in results[kind])

    tokens = {r[2] for rs in results.values() for r in rs}
    summary = {
        "rounds": ns.rounds,
        "new_tokens": ns.new_tokens,
        "completion_tokens_seen": sorted(tokens),
        "threads": ns.threads,
        "gateway_nice": ns.gateway_nice,
        "split_cores": ns.split_cores,
        "ttft_ms_median": {k: round(med(k, 0), 1) for k in results},
        "decode_tps_median": {k: round(med(k, 1), 1) for k in results},
        "decode_ratio_gateway_vs_grpc": round(med("gateway", 1) / med("grpc", 1), 3),
        "ttft_overhead_ms_median": round(med("gateway", 0) - med("grpc", 0), 1),
        # What the path adds to the device's own TTFT (client TTFT - device TTFT): prefill noise cancels.
        "transport_ms_median": {
            k: round(statistics.median(r[0] - r[3] for r in results[k]), 2) for k in results
        },
        "transport_overhead_ms": round(
            statistics.median(r[0] - r[3] for r in results["gateway"])
            - statistics.median(r[0] - r[3] for r in results["grpc"]),
            2,
        ),
        # CPU the gateway process used (all of it: requests, SSE, its telemetry reads) per streamed token.
        "gateway_cpu_ms_per_token": round(gateway_cpu_s * 1000 / sum(r[2] for r in results["gateway"]), 3),
        "gateway_cpu_share_of_wall": round(gateway_cpu_s / wall_s, 4),
        "ttft_overhead_ms_median_of_pairs": round(
            statistics.median(g[0] - d[0] for g, d in zip(results["gateway"], results["grpc"], strict=True)),
            1,
        ),
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
