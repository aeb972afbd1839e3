"""A fleet behind LiteLLM's proxy: 3 virtual phones, 3 gateways, one `litellm --config` (docs/fleet.md).

    python -m bench.bench_fleet --artifact .cache/artifacts/default [--requests 60] [--max-tokens 16]

Real parts: three `edgellm daemon` processes serving the bundled model, each on a virtual phone
(edgellm.sim: its thermal plant and firmware, the real governor) with a different thermal profile —
sd8gen3, article7b, and sd8gen3 in the sun (ambient 42 °C, above its 39 °C setpoint: the governor
runs out of rungs); three `edgellm gateway --device NAME`; the config `edgellm fleet config` writes;
the LiteLLM proxy; the official openai SDK. LiteLLM is not a project dependency (about 60
packages): it lives in its own venv, `$EDGELLM_LITELLM_VENV` (default .cache/bench-venvs/litellm;
`python3.11 -m venv .cache/bench-venvs/litellm && .cache/bench-venvs/litellm/bin/pip install
'litellm[proxy]'`). Without it the bench says so and exits 0.

It checks: all requests answered; one daemon killed mid-run and its requests answered elsewhere;
the hot phone gets the fewest; each gateway's Prometheus text carries its own `device` label. It
reports who served what (LiteLLM's `x-litellm-model-id` header = the device) and the router's
added latency (the same phone through the proxy's pinned group vs straight to its gateway,
alternating). One JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from bench.servers import free_port, serve
from edgellm.sim.profile import PROFILE_DIR

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("EDGELLM_LITELLM_VENV", ROOT / ".cache/bench-venvs/litellm"))
MODEL = "smollm2-135m-instruct"
PROMPT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name one colour of the sky."}]
# (device label, profile, why): different thermal profiles; "hot" is sd8gen3 at ambient 42 °C.
PHONES = (("cool", "sd8gen3"), ("slow", "article7b"), ("hot", "sd8gen3-sun"))
KILLED = "slow"  # whose daemon is killed mid-run


@dataclass
class Phone:
    """One virtual phone's daemon and gateway."""

    device: str
    daemon: subprocess.Popen[bytes]
    gateway_port: int

    @property
    def base(self) -> str:
        """The gateway's root URL."""
        return f"http://127.0.0.1:{self.gateway_port}"


def _sun_profile(work: Path) -> Path:
    """sd8gen3 in the sun: ambient 42 °C, above the 39 °C setpoint the governor aims at."""
    data = json.loads((PROFILE_DIR / "sd8gen3.json").read_text())
    data["name"], data["ambient_c"] = "sd8gen3-sun", 42.0
    path = work / "sd8gen3-sun.json"
    path.write_text(json.dumps(data))
    return path


def start_phone(stack: ExitStack, device: str, profile: str, artifact: Path, time_scale: float) -> Phone:
    """Start a daemon on a virtual phone and a gateway labelled DEVICE in front of it."""
    dport, gport = free_port(), free_port()
    target = f"127.0.0.1:{dport}"
    edgellm = [sys.executable, "-m", "edgellm"]
    daemon = [*edgellm, "daemon", "--port", str(dport), "--model", str(artifact), "--threads", "1"]
    daemon += ["--data-dir", tempfile.mkdtemp(), "--insecure-loopback"]
    daemon += ["--virtual-phone", profile, "--time-scale", str(time_scale)]
    gateway = [*edgellm, "gateway", "--target", target, "--port", str(gport), "--insecure-loopback"]
    gateway += ["--device", device, "--telemetry-period", "0.5"]
    proc = stack.enter_context(serve(f"daemon-{device}", daemon, target))
    # A hot phone's gateway answers /health 503 device_hot: that is ready too.
    health = f"http://127.0.0.1:{gport}/health"
    stack.enter_context(serve(f"gateway-{device}", gateway, health, statuses=(200, 503)))
    return Phone(device, proc, gport)


def wait_hot(p: Phone, within_s: float = 120.0) -> float:
    """Seconds until P's gateway reports its phone hot (its /health answers 503 device_hot)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        r = httpx.get(f"{p.base}/health", timeout=5)
        if r.status_code == 503 and "device_hot" in r.text:
            return time.monotonic() - t0
        time.sleep(0.5)
    raise SystemExit(f"{p.device} never got hot within {within_s} s")


def ask(client: openai.OpenAI, model: str, max_tokens: int) -> tuple[str, float, int]:
    """One chat request: (the device LiteLLM says served it, seconds, completion tokens)."""
    t0 = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=PROMPT,
        max_tokens=max_tokens,
        temperature=0,
    )
    answer = raw.parse()
    seconds = time.perf_counter() - t0
    device = raw.headers.get("x-litellm-model-id", "direct")
    return device, seconds, answer.usage.completion_tokens if answer.usage else 0


def overhead(proxy: openai.OpenAI, direct: openai.OpenAI, device: str, rounds: int) -> dict[str, float]:
    """Median seconds per request: through the proxy's pinned group vs straight to the gateway."""
    times: dict[str, list[float]] = {"proxy": [], "direct": []}
    for i in range(rounds):  # alternate which goes first
        order = ("proxy", "direct") if i % 2 == 0 else ("direct", "proxy")
        for kind in order:
            client, model = (proxy, f"{MODEL}@{device}") if kind == "proxy" else (direct, MODEL)
            times[kind].append(ask(client, model, 8)[1])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "direct_median_ms": round(med["direct"] * 1000, 1),
        "proxy_median_ms": round(med["proxy"] * 1000, 1),
        "added_ms": round((med["proxy"] - med["direct"]) * 1000, 1),
        "ratio": round(med["proxy"] / med["direct"], 3),
    }


def run_load(
    proxy: openai.OpenAI, phones: dict[str, Phone], n: int, max_tokens: int, workers: int
) -> dict[str, object]:
    """N requests through the proxy, WORKERS at a time; KILLED's daemon is killed after a third."""
    served: Counter[str] = Counter()
    errors: list[str] = []
    seconds: list[float] = []
    kill_at = n // 3

    def one(i: int) -> None:
        if i == kill_at:
            phones[KILLED].daemon.kill()
        try:
            device, s, _ = ask(proxy, MODEL, max_tokens)
            served[device] += 1
            seconds.append(s)
        except openai.APIError as err:
            errors.append(f"{type(err).__name__}: {str(err)[:200]}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(n)))
    return {
        "wall_s": round(time.perf_counter() - t0, 1),
        "answered": sum(served.values()),
        "errors": errors,
        "served_by_device": dict(served),
        "median_s": round(statistics.median(seconds), 3) if seconds else None,
        "killed_after_request": kill_at,
    }


def scrape(phones: dict[str, Phone], key: str) -> dict[str, dict[str, Any]]:
    """Per gateway: its device labels and 200/503 answers, from its own Prometheus text."""
    out: dict[str, dict[str, Any]] = {}
    for name, p in phones.items():
        text = httpx.get(f"{p.base}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10).text
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        labels = sorted({s.labels.get("device", "") for s in samples})
        answers = {s.labels["status"]: s.value for s in samples if s.name == "edgellm_gateway_requests_total"}
        shed = sum(s.value for s in samples if s.name == "edgellm_gateway_shed_requests_total")
        out[name] = {"device_labels": labels, "answers": answers, "shed": shed}
    return out


def proxy_argv(config: Path, port: int) -> list[str]:
    """`litellm --config` from its own venv."""
    return [str(VENV / "bin/litellm"), "--config", str(config), "--port", str(port), "--num_workers", "1"]


def main() -> int:
    """Start the fleet, run the load and the overhead rounds, print one JSON object."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--workers", type=int, default=3, help="requests in flight through the proxy")
    ap.add_argument("--rounds", type=int, default=10, help="overhead rounds (proxy vs direct)")
    ap.add_argument("--time-scale", type=float, default=20.0, help="virtual phones' simulated s per real s")
    ns = ap.parse_args()
    if not (VENV / "bin/litellm").exists():
        print(json.dumps({"skipped": f"no LiteLLM venv at {VENV} (see this file's docstring)"}))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop every server we started
    key = secrets.token_hex(16)
    os.environ["EDGELLM_GATEWAY_API_KEY"] = key  # the gateways and the proxy read the same key
    master = os.environ["LITELLM_MASTER_KEY"] = f"sk-{secrets.token_hex(16)}"  # the proxy's clients'
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at its start
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    profiles = {"sd8gen3": "sd8gen3", "article7b": "article7b", "sd8gen3-sun": str(_sun_profile(work))}
    load_avg = os.getloadavg()
    with ExitStack() as stack:
        phones = {d: start_phone(stack, d, profiles[prof], ns.artifact, ns.time_scale) for d, prof in PHONES}
        hot_after_s = wait_hot(phones["hot"])
        config = work / "litellm.yaml"
        targets = [a for d, p in phones.items() for a in ("--target", f"{d}=127.0.0.1:{p.gateway_port}")]
        subprocess.run(
            [sys.executable, "-m", "edgellm", "fleet", "config", *targets, "-o", str(config)],
            check=True,
            capture_output=True,
        )
        pport = free_port()
        stack.enter_context(
            serve("litellm", proxy_argv(config, pport), f"http://127.0.0.1:{pport}/health/liveliness")
        )
        proxy = stack.enter_context(
            openai.OpenAI(base_url=f"http://127.0.0.1:{pport}/v1", api_key=master, max_retries=0, timeout=300)
        )
        direct = stack.enter_context(
            openai.OpenAI(base_url=f"{phones['cool'].base}/v1", api_key=key, max_retries=0, timeout=300)
        )
        ask(proxy, MODEL, 4)  # warm the proxy's clients
        router = overhead(proxy, direct, "cool", ns.rounds)
        load = run_load(proxy, phones, ns.requests, ns.max_tokens, ns.workers)
        gateways = scrape(phones, key)
    served = load["served_by_device"]
    assert isinstance(served, dict)
    checks = {
        "all_answered": load["answered"] == ns.requests,
        "killed_phone_requests_served_elsewhere": load["answered"] == ns.requests and not load["errors"],
        "hot_phone_fewest": served.get("hot", 0) <= min(served.get(d, 0) for d, _ in PHONES if d != "hot"),
        "distinct_device_labels": sorted(tuple(g["device_labels"]) for g in gateways.values())
        == [("cool",), ("hot",), ("slow",)],
    }
    print(json.dumps({
        "checks": checks, "hot_after_s": round(hot_after_s, 1), "load": load, "router_overhead": router,
        "gateways": gateways, "load_average_at_start": [round(x, 2) for x in load_avg],
        "time_scale": ns.time_scale, "max_tokens": ns.max_tokens, "workers": ns.workers,
    }, indent=1))  # fmt: skip
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
