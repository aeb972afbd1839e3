"""Chat sampling defaults for the bundled model: answer quality and looping, tuning vs held-out prompts.

For each sampling configuration, asks every prompt of a set (through a real daemon over gRPC, the
chat template applied on the device, the model's own default system prompt) and scores:
- factual prompts: the expected word appears in the answer;
- open prompts: the answer "loops" when a non-empty line repeats or a 6-word sequence occurs 3+ times.
Sampled configurations run with several seeds. The defaults are chosen on TUNING only; HELD_OUT
is reported for the chosen configuration and the baselines, never used to choose.

Usage: python bench/bench_chat_defaults.py [--target H:P | --artifact DIR] [--seeds 3] [--set tuning]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from edgellm.client.client import DaemonClient
from edgellm.common.channel import ChannelSecurity
from edgellm.common.paths import default_artifact_dir

TUNING: list[tuple[str, str | None]] = [
    ("What is the capital of France?", "Paris"),
    ("What is the largest planet in the solar system?", "Jupiter"),
    ("Write a short poem about the sea.", None),
    ("Tell me a story about a robot.", None),
    ("Describe your ideal weekend.", None),
    ("Write a haiku about autumn leaves.", None),
    ("What is the boiling point of water in degrees Celsius?", "100"),
    ("Write a short poem about the mountains.", None),
    ("Write a song about friendship.", None),
]
HELD_OUT: list[tuple[str, str | None]] = [
    ("Which city is the capital of Japan?", "Tokyo"),
    ("How many days are there in a week?", "seven|7"),
    ("Write a short poem about the moon.", None),
    ("Write a short poem about a city at night.", None),
    ("Give me three tips for learning to cook.", None),
    ("Explain why the sky is blue.", None),
    ("Write a limerick about a cat.", None),
    ("Tell me about your favourite season.", None),
]
# rp: repetition penalty (CTRL-style, over prompt and generated tokens, as in HF and llama.cpp);
# fp / pp: frequency / presence penalty (OpenAI-style, over generated tokens only).
CONFIGS: dict[str, dict[str, float]] = {
    "greedy": {"temperature": 0.0},
    "greedy rp1.05": {"temperature": 0.0, "repetition_penalty": 1.05},
    "greedy rp1.1": {"temperature": 0.0, "repetition_penalty": 1.1},
    "greedy fp0.3": {"temperature": 0.0, "frequency_penalty": 0.3},
    "greedy pp0.6": {"temperature": 0.0, "presence_penalty": 0.6},
    "greedy fp0.5": {"temperature": 0.0, "frequency_penalty": 0.5},
    "greedy fp0.7": {"temperature": 0.0, "frequency_penalty": 0.7},
    "t0.2 p0.9": {"temperature": 0.2, "top_p": 0.9},
    "t0.2 p0.9 rp1.05": {"temperature": 0.2, "top_p": 0.9, "repetition_penalty": 1.05},
    "t0.2 p0.9 rp1.1": {"temperature": 0.2, "top_p": 0.9, "repetition_penalty": 1.1},
    "t0.6 p0.9 rp1.1": {"temperature": 0.6, "top_p": 0.9, "repetition_penalty": 1.1},
    "t0.2 p0.9 fp0.3": {"temperature": 0.2, "top_p": 0.9, "frequency_penalty": 0.3},
    "t0.2 p0.9 fp0.5": {"temperature": 0.2, "top_p": 0.9, "frequency_penalty": 0.5},
    "t0.2 p0.9 fp0.7": {"temperature": 0.2, "top_p": 0.9, "frequency_penalty": 0.7},
    "t0.2 p0.5 fp0.5": {"temperature": 0.2, "top_p": 0.5, "frequency_penalty": 0.5},
    "t0.2 p0.5 fp0.7": {"temperature": 0.2, "top_p": 0.5, "frequency_penalty": 0.7},
    "t0.2 p0.9 pp0.6": {"temperature": 0.2, "top_p": 0.9, "presence_penalty": 0.6},
}


def loops(text: str) -> bool:
    """A repeated non-empty line, or a 6-word sequence that occurs three times or more."""
    lines = [ln.strip().lower() for ln in text.splitlines() if ln.strip()]
    if len(lines) != len(set(lines)):
        return True
    words = text.lower().split()
    grams = Counter(tuple(words[i : i + 6]) for i in range(len(words) - 5))
    return any(n >= 3 for n in grams.values())


def correct(text: str, expected: str) -> bool:
    """Any of the |-separated expected words in the answer (case-insensitive)."""
    return any(word.lower() in text.lower() for word in expected.split("|"))


def run_config(
    client: DaemonClient,
    prompts: list[tuple[str, str | None]],
    cfg: dict[str, float],
    seeds: int,
    tokens: int,
) -> dict[str, Any]:
    """Score one configuration over a prompt set."""
    facts = facts_ok = opens = opens_loop = 0
    samples: list[dict[str, Any]] = []
    seed_list: list[int | None] = [None] if cfg.get("temperature", 0.0) == 0 else list(range(1, seeds + 1))
    for prompt, expected in prompts:
        for seed in seed_list:
            out = client.generate(
                messages=[("user", prompt)],
                max_new_tokens=tokens,
                seed=seed,
                temperature=cfg.get("temperature", 0.0),
                top_p=cfg.get("top_p", 1.0),
                repetition_penalty=cfg.get("repetition_penalty", 1.0),
                frequency_penalty=cfg.get("frequency_penalty", 0.0),
                presence_penalty=cfg.get("presence_penalty", 0.0),
            )
            if expected is not None:
                facts += 1
                facts_ok += correct(out.text, expected)
            else:
                opens += 1
                opens_loop += loops(out.text)
            samples.append({"prompt": prompt, "seed": seed, "loops": loops(out.text), "text": out.text})
    return {
        "facts_correct": f"{facts_ok}/{facts}",
        "open_looping": f"{opens_loop}/{opens}",
        "samples": samples,
    }


def paris_rate(client: DaemonClient, cfg: dict[str, float], seeds: int) -> str:
    """How often "What is the capital of France?" gets Paris over seeds 1..N (sampled configs)."""
    hits = 0
    for seed in range(1, seeds + 1):
        out = client.generate(
            messages=[("user", "What is the capital of France?")],
            max_new_tokens=40,
            seed=seed,
            temperature=cfg.get("temperature", 0.0),
            top_p=cfg.get("top_p", 1.0),
            repetition_penalty=cfg.get("repetition_penalty", 1.0),
            frequency_penalty=cfg.get("frequency_penalty", 0.0),
            presence_penalty=cfg.get("presence_penalty", 0.0),
        )
        hits += "Paris" in out.text
    return f"{hits}/{seeds}"


def free_port() -> int:
    """A port the kernel says is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_daemon(artifact: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`edgellm daemon` on a free port, waited for until SERVING."""
    port = free_port()
    cmd = [sys.executable, "-m", "edgellm.cli", "--log-level", "WARNING", "daemon", "--port", str(port)]
    # --insecure-loopback: a benchmark of sampling settings, plaintext on loopback.
    proc = subprocess.Popen(
        [*cmd, "--model", str(artifact), "--data-dir", f"/tmp/bench-chat-{port}", "--insecure-loopback"]
    )
    target = f"127.0.0.1:{port}"
    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for _ in range(600):
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return proc, target
            except grpc.RpcError:
                time.sleep(0.2)
    proc.terminate()
    raise SystemExit("daemon did not become SERVING")


def main() -> int:
    """Run the chosen sets and configurations; print a table and write JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None, help="an already running daemon (else one is started)")
    ap.add_argument("--artifact", type=Path, default=default_artifact_dir())
    ap.add_argument("--set", choices=("tuning", "held-out", "both"), default="both")
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS), help="names from CONFIGS")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per sampled configuration")
    ap.add_argument("--tokens", type=int, default=160, help="max new tokens per answer")
    ap.add_argument("--paris-seeds", type=int, default=0, help="also: Paris rate over N seeds (sampled)")
    ap.add_argument("--out", type=Path, default=Path(".cache/bench/chat_defaults.json"))
    ns = ap.parse_args()
    proc = None
    target = ns.target
    if target is None:
        proc, target = start_daemon(ns.artifact)
    sets = {"tuning": TUNING, "held-out": HELD_OUT}
    chosen = list(sets) if ns.set == "both" else [ns.set]
    results: dict[str, dict[str, Any]] = {}
    try:
        with DaemonClient(target, security=ChannelSecurity.insecure_loopback()) as client:
            for set_name in chosen:
                for name in ns.configs:
                    r = run_config(client, sets[set_name], CONFIGS[name], ns.seeds, ns.tokens)
                    sampled = CONFIGS[name].get("temperature", 0.0) > 0
                    if ns.paris_seeds and sampled:
                        r["paris"] = paris_rate(client, CONFIGS[name], ns.paris_seeds)
                    results[f"{set_name} | {name}"] = r
                    print(
                        f"{set_name:9} {name:20} facts {r['facts_correct']:>6}  loops {r['open_looping']:>6}"
                        + (f"  Paris {r['paris']}" if "paris" in r else "")
                    )
                    ns.out.parent.mkdir(parents=True, exist_ok=True)  # after each: a run can be stopped
                    ns.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
