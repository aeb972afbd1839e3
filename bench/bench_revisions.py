"""Two source trees of edgellm side by side: decode tok/s and TTFT through each one's daemon.

A refactor must not cost speed. This starts one daemon from each tree (`python -m edgellm daemon`
with that tree's `src/` first on the path, the same artifact, plaintext on loopback) and one
client that alternates the same greedy request between them, so machine noise hits both alike.
The client speaks the generated gRPC stubs of `--after` (the wire contract both trees share).

    git worktree add .cache/before <rev>
    python bench/bench_revisions.py --before .cache/before --after . \
        --artifact .cache/artifacts/default --reps 9

Every request decodes exactly `--tokens` tokens: the tokenizer's special tokens are banned with
a logit bias, so end-of-turn cannot cut a run short. Both daemons must answer with the same
tokens (greedy, same artifact): the run fails otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

PROMPT = (
    "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle, "
    "describing the sea, the weather and every person he meets along the way."
)
NO_EOS = -float("inf")


@dataclass
class Timing:
    """One request's client-side view."""

    ttft_ms: float
    decode_tps: float
    daemon_decode_tps: float
    tokens: tuple[int, ...]


def free_port() -> int:
    """A port the OS says is free now (the daemon binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def special_token_ids(artifact: Path) -> list[int]:
    """The tokenizer's special tokens (end-of-turn among them), from the artifact's tokenizer.json."""
    tokenizer = json.loads((artifact / "tokenizer.json").read_text(encoding="utf-8"))
    return sorted({int(t["id"]) for t in tokenizer.get("added_tokens", []) if t.get("special")})


def start_daemon(
    tree: Path, artifact: Path, data_dir: Path, port: int, threads: int
) -> subprocess.Popen[bytes]:
    """`edgellm daemon` from `tree`'s sources, plaintext on loopback (no TLS, no token)."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve() / "src"), "EDGELLM_HOME": str(data_dir)}
    argv = [sys.executable, "-m", "edgellm", "daemon", "--port", str(port), "--insecure-loopback"]
    argv += ["--model", str(artifact), "--data-dir", str(data_dir), "--threads", str(threads)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_loaded(stub: object, proc: subprocess.Popen[bytes], pb: object, timeout_s: float = 180.0) -> None:
    """Until the daemon reports a loaded model (GetStatus), or fail if it died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"a daemon exited with {proc.returncode} before loading")
        try:
            status = stub.GetStatus(pb.GetStatusRequest(), timeout=2)  # type: ignore[attr-defined]
            if status.model.artifact_id:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.5)
    raise SystemExit("a daemon did not load the model in time")


def one_request(stub: object, pb: object, banned: list[int], tokens: int) -> Timing:
    """A greedy Generate of exactly `tokens` tokens, timed at the client."""
    request = pb.GenerateRequest(  # type: ignore[attr-defined]
        prompt=PROMPT,
        max_new_tokens=tokens,
        speculation=pb.SPECULATION_OFF,  # type: ignore[attr-defined]
    )
    request.sampling.temperature = 0.0
    for t in banned:
        request.sampling.logit_bias[t] = NO_EOS
    t0 = time.perf_counter()
    first = last = 0.0
    ids: list[int] = []
    daemon_tps = 0.0
    for reply in stub.Generate(request, timeout=300):  # type: ignore[attr-defined]
        now = time.perf_counter()
        if reply.token_ids:
            ids.extend(reply.token_ids)
            first = first or now
            last = now
        if reply.finish_reason:
            daemon_tps = reply.stats.decode_tokens_per_second
    return Timing((first - t0) * 1000, (len(ids) - 1) / (last - first), daemon_tps, tuple(ids))


def main() -> int:
    """Alternate requests between the two daemons and print medians and after ÷ before ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="source tree (a checkout) of the old revision")
    ap.add_argument("--after", type=Path, default=Path(), help="source tree of the new revision")
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="also write the JSON summary here")
    args = ap.parse_args()
    sys.path.insert(0, str(args.after.resolve() / "src"))
    from edgellm.v1 import device_pb2 as pb
    from edgellm.v1 import device_pb2_grpc as rpc

    banned = special_token_ids(args.artifact)
    trees = {"before": args.before, "after": args.after}
    with tempfile.TemporaryDirectory() as tmp:
        ports = {name: free_port() for name in trees}
        procs = {
            name: start_daemon(tree, args.artifact, Path(tmp) / name, ports[name], args.threads)
            for name, tree in trees.items()
        }
        try:
            channels = {name: grpc.insecure_channel(f"127.0.0.1:{ports[name]}") for name in trees}
            stubs = {name: rpc.DeviceDaemonStub(ch) for name, ch in channels.items()}
            for name in trees:
                wait_loaded(stubs[name], procs[name], pb)
            for name in trees:  # one untimed request each: first-request effects out of the figures
                one_request(stubs[name], pb, banned, args.tokens)
            runs: dict[str, list[Timing]] = {name: [] for name in trees}
            for rep in range(args.reps):
                order = list(trees) if rep % 2 == 0 else list(reversed(trees))
                for name in order:
                    runs[name].append(one_request(stubs[name], pb, banned, args.tokens))
        finally:
            for proc in procs.values():
                proc.terminate()
            for proc in procs.values():
                proc.wait(30)
    if runs["before"][0].tokens != runs["after"][0].tokens:
        raise SystemExit("the two daemons answered the same greedy request with different tokens")
    summary: dict[str, object] = {"reps": args.reps, "tokens": args.tokens, "threads": args.threads}
    for name, timings in runs.items():
        summary[name] = {
            "decode_tps": statistics.median(t.decode_tps for t in timings),
            "daemon_decode_tps": statistics.median(t.daemon_decode_tps for t in timings),
            "ttft_ms": statistics.median(t.ttft_ms for t in timings),
        }
    b, a = summary["before"], summary["after"]
    assert isinstance(b, dict) and isinstance(a, dict)
    summary["after_over_before"] = {
        "decode_tps": a["decode_tps"] / b["decode_tps"],
        "daemon_decode_tps": a["daemon_decode_tps"] / b["daemon_decode_tps"],
        "ttft_ms": a["ttft_ms"] / b["ttft_ms"],
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
