"""Tool calls of the bundled 135M model through the gateway, sampled at 0.8: do they parse and validate?

Side by side on the same daemon and the same rendered prompt (the gateway's Hermes fallback, five
tool schemas with nested objects, enums and arrays, tests/gateway/tool_schemas.py):
- `gateway`: `tool_choice: required` through `edgellm gateway` with the official SDK (the calls'
  llguidance grammar on the device);
- `unconstrained`: the same messages straight to the daemon with no constraint, its text read back
  by the same parsers (what the model writes on its own).
Each sample counts as valid when it has at least one call, every call names an offered function and
its arguments validate against that function's schema (jsonschema).

With `--named`, sample i names the function TOOLS[i % 5] (`tool_choice: {"type": "function", ...}`),
all five offered: every schema's constrained arguments are validated in turn (with `required` the
model picks, and it may never pick one of them).

Usage: python -m bench.bench_tools --artifact .cache/artifacts/default [--samples 50] [--named] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import openai

from bench.servers import daemon_and_gateway
from edgellm.client.client import DaemonClient
from edgellm.client.sampling import RECOMMENDED
from edgellm.common.channel import ChannelSecurity
from edgellm.gateway.params import parse
from edgellm.gateway.tools.parsers import parse_calls
from tests.gateway.tool_schemas import TOOLS

PROMPT = "Plan my trip to Rome next week."
SCHEMAS = {t["function"]["name"]: t["function"].get("parameters", {}) for t in TOOLS}


def _valid(calls: list[tuple[str, str]]) -> bool:
    """At least one call, each to an offered function with arguments its schema accepts."""
    if not calls:
        return False
    try:
        for name, arguments in calls:
            jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    except (KeyError, ValueError, jsonschema.ValidationError):
        return False
    return True


Choice = str | dict[str, Any]


def tool_choice(seed: int, named: bool) -> Choice:
    """`required`, or with ``named`` the function TOOLS[seed % 5] by name."""
    if not named:
        return "required"
    return {"type": "function", "function": {"name": TOOLS[seed % len(TOOLS)]["function"]["name"]}}


def via_gateway(sdk: openai.OpenAI, model: str, seed: int, max_tokens: int, pick: Choice) -> dict[str, Any]:
    """One request through the gateway, with ``pick`` as its tool_choice."""
    start = time.perf_counter()
    reply = sdk.chat.completions.create(  # type: ignore[call-overload]  # tool_choice: str | the named dict
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        tools=TOOLS,
        tool_choice=pick,
        temperature=0.8,
        seed=seed,
        max_tokens=max_tokens,
    )
    choice = reply.choices[0]
    calls = [
        (c.function.name, c.function.arguments)
        for c in choice.message.tool_calls or []
        if c.type == "function"
    ]
    return {
        "finish": choice.finish_reason,
        "calls": calls,
        "valid": _valid(calls),
        "tokens": reply.usage.completion_tokens if reply.usage else 0,
        "s": time.perf_counter() - start,
    }


def unconstrained(
    client: DaemonClient, model: str, seed: int, max_tokens: int, choice: Choice
) -> dict[str, Any]:
    """The same rendered prompt straight to the daemon, no constraint; the text parsed back."""
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "tools": TOOLS,
            "tool_choice": choice, "temperature": 0.8, "seed": seed,
            "max_tokens": max_tokens}  # fmt: skip
    params = replace(parse("chat", body, max_tokens, defaults=RECOMMENDED).params, constraint=None)
    start = time.perf_counter()
    out = client.complete(params)
    parsed = parse_calls(out.text, frozenset(SCHEMAS))
    calls = [(c.name, c.arguments) for c in parsed.calls]
    return {"finish": out.finish_reason, "calls": calls, "valid": _valid(calls), "text": out.text[:200],
            "tokens": len(out.token_ids), "s": time.perf_counter() - start}  # fmt: skip


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "samples": len(runs),
        "valid": sum(r["valid"] for r in runs),
        "with_calls": sum(bool(r["calls"]) for r in runs),
        "finish": dict(Counter(str(r["finish"]) for r in runs)),
        "functions": dict(Counter(name for r in runs for name, _ in r["calls"])),
        "valid_by_function": dict(Counter(name for r in runs if r["valid"] for name, _ in r["calls"])),
        "calls_per_answer": round(statistics.mean(len(r["calls"]) for r in runs), 2),
        "median_tokens": statistics.median(r["tokens"] for r in runs),
        "median_s": round(statistics.median(r["s"] for r in runs), 2),
    }


def main() -> None:
    """Run both paths, interleaved per seed; print and optionally save the summary."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--named", action="store_true", help="sample i names TOOLS[i % 5] instead of `required`")
    ap.add_argument("--out", type=Path)
    ns = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the servers
    runs: dict[str, list[dict[str, Any]]] = {"gateway": [], "unconstrained": []}
    with (
        daemon_and_gateway(ns.artifact) as (target, base),
        DaemonClient(target, security=ChannelSecurity.insecure_loopback()) as client,
        openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0) as sdk,
    ):
        model = client.status().model.name
        for seed in range(ns.samples):
            choice = tool_choice(seed, ns.named)
            runs["gateway"].append(via_gateway(sdk, model, seed, ns.max_tokens, choice))
            runs["unconstrained"].append(unconstrained(client, model, seed, ns.max_tokens, choice))
    result: dict[str, Any] = {"tool_choice": "named, TOOLS[i % 5]" if ns.named else "required"}
    result |= {name: _summary(r) for name, r in runs.items()}
    result["unconstrained_examples"] = [r["text"] for r in runs["unconstrained"][:3]]
    print(json.dumps(result, indent=2))
    if ns.out:
        ns.out.write_text(json.dumps({"summary": result, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
