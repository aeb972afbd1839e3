"""Serving side of bench_scale: an `edgellm daemon` and a llama-cpp-python child, same threads, interleaved.

Both engines are loaded at once (each its own process), then take turns, order swapped each
repetition, so machine noise hits both. Per engine: RSS after load (psutil, the process alone),
peak RSS over the session (which ends with a 2,048-position conversation: a ~1,500-token prompt,
128 tokens, a ~280-token user turn, 100 tokens), prefill tok/s of that prompt, and decode tok/s
after a short prompt. Greedy, stop ids banned so every decode runs its full length; timings are
each engine's own (the daemon's GenerateStats; around `Llama.eval` in the child).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs in the venv

from bench.scale_shapes import TreeSampler
from bench.servers import free_port, serve
from edgellm.client.client import DaemonClient, build_request
from edgellm.common.channel import ChannelSecurity

CHILD = Path(__file__).with_name("scale_llama_child.py")
NO_STOP = -float("inf")


@dataclass(frozen=True)
class Workload:
    """Token ids and chat messages of the three requests, rendered once with the checkpoint's tokenizer."""

    short: list[tuple[str, str]]  # decode run: a short prompt
    short_ids: list[int]
    long: list[tuple[str, str]]  # conversation turn 1: the prefill prompt
    long_ids: list[int]
    more: str  # conversation turn 2: the user's next message
    more_ids: list[int]
    stop_ids: list[int]
    new_tokens: int = 128
    turn2_tokens: int = 100


def fit_text(tok: Any, corpus: list[int], target: int, nonce: int) -> tuple[list[tuple[str, str]], list[int]]:
    """A one-user-message chat whose rendered prompt is TARGET tokens (within a few), and its ids."""
    take = target
    for _ in range(4):
        text = f"Session {nonce}. " + str(tok.decode(corpus[:take]))
        msgs = [("user", text)]
        ids = render(tok, msgs)
        if abs(len(ids) - target) <= 2:
            break
        take += target - len(ids)
    return msgs, ids


def render(tok: Any, msgs: list[tuple[str, str]]) -> list[int]:
    """The prompt ids as transformers' apply_chat_template renders them (generation prompt added)."""
    chat = [{"role": r, "content": c} for r, c in msgs]
    out = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    return [int(i) for i in out]


def workload(hf_dir: Path, prompt_tokens: int, stop_ids: list[int], nonce: int) -> Workload:
    """The requests of one repetition; NONCE keeps any prefix cache from answering the prefill."""
    import transformers

    from edgellm.common.paths import require_data_file

    tok = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    text = require_data_file("wikitext2-valid.txt").read_text(encoding="utf-8")
    corpus = tok(text[:40000], add_special_tokens=False)["input_ids"]
    short, short_ids = fit_text(tok, corpus[5000:], 64, nonce)
    long, long_ids = fit_text(tok, corpus, prompt_tokens, nonce)
    more = str(tok.decode(corpus[3000:3280]))
    more_ids = tok(more, add_special_tokens=False)["input_ids"]
    return Workload(short, short_ids, long, long_ids, more, more_ids, stop_ids)


class LlamaSide:
    """The llama-cpp-python child: one GGUF, N_CTX, THREADS; one JSON reply per command."""

    def __init__(self, python: Path, gguf: Path, n_ctx: int, threads: int) -> None:
        argv = [str(python), str(CHILD), str(gguf), str(n_ctx), str(threads)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.loaded = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"llama child exited with {self.proc.wait()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Send one command, wait for its reply."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def decode(self, w: Workload) -> dict[str, Any]:
        """Short prompt, then NEW_TOKENS greedy tokens."""
        return self.ask({"op": "decode", "ids": w.short_ids, "n": w.new_tokens, "ban": w.stop_ids})

    def conversation(self, w: Workload) -> dict[str, Any]:
        """The 2,048-position conversation; its prefill rate."""
        cmd = {"op": "conversation", "ids": w.long_ids, "n1": w.new_tokens, "more": w.more_ids}
        return self.ask(cmd | {"n2": w.turn2_tokens, "ban": w.stop_ids})

    def close(self) -> None:
        """End the child (stdin closed: its loop ends)."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


class DaemonSide:
    """A real `edgellm daemon` process; requests over gRPC, timings from its GenerateStats."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.client = DaemonClient(target, security=ChannelSecurity.insecure_loopback())

    def generate(self, msgs: list[tuple[str, str]], n: int, stop_ids: list[int], session: str = "") -> Any:
        """One greedy request of exactly N tokens; its final stats (and the reply text)."""
        bias = dict.fromkeys(stop_ids, NO_STOP)
        request = build_request(None, tuple(msgs), n, session_id=session, speculation="off", logit_bias=bias)
        text, stats = [], None
        for r in self.client.stream(request):
            text.append(r.text)
            if r.finish_reason:
                stats = r.stats
        assert stats is not None
        return stats, "".join(text)

    def decode(self, w: Workload) -> dict[str, Any]:
        """Short prompt, then NEW_TOKENS tokens."""
        stats, _ = self.generate(w.short, w.new_tokens, w.stop_ids)
        return {"decode_tps": stats.decode_tokens_per_second, "completion": stats.completion_tokens}

    def conversation(self, w: Workload, session: str) -> dict[str, Any]:
        """Two turns in one session, ~2,048 positions; turn 1's prefill rate."""
        first, reply = self.generate(w.long, w.new_tokens, w.stop_ids, session)
        turn2 = [*w.long, ("assistant", reply), ("user", w.more)]
        second, _ = self.generate(turn2, w.turn2_tokens, w.stop_ids, session)
        return {
            "prefill_tps": first.prefill_tokens_per_second,
            "decode_tps_at_context": first.decode_tokens_per_second,
            "prompt_tokens": first.prompt_tokens,
            "positions": second.prompt_tokens + second.completion_tokens,
        }


@contextmanager
def daemon_process(artifact: Path, threads: int) -> Iterator[tuple[DaemonSide, int]]:
    """`edgellm daemon --model ARTIFACT --threads T` on a free port, plaintext loopback; (client, pid)."""
    port = free_port()
    argv = [sys.executable, "-m", "edgellm", "daemon", "--port", str(port), "--model", str(artifact)]
    argv += ["--threads", str(threads), "--data-dir", tempfile.mkdtemp(), "--insecure-loopback"]
    argv += ["--governor", "off"]  # no thermal policy on this host: threads stay as asked
    with serve(f"daemon-t{threads}", argv, f"127.0.0.1:{port}") as proc:
        side = DaemonSide(f"127.0.0.1:{port}")
        try:
            yield side, proc.pid
        finally:
            side.client.close()


def rss(pid: int) -> int:
    """Resident bytes of one process now."""
    return int(psutil.Process(pid).memory_info().rss)


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(float(r[key]) for r in runs), 2)


def summarize(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Medians per engine and metric."""
    out: dict[str, Any] = {}
    for engine, kinds in runs.items():
        out[engine] = {
            "decode_tps": _median(kinds["decode"], "decode_tps"),
            "prefill_tps": _median(kinds["conversation"], "prefill_tps"),
            "decode_tps_long": _median(kinds["conversation"], "decode_tps_at_context"),
            "positions": max(int(r["positions"]) for r in kinds["conversation"]),
        }
    return out


def run_reps(sides: dict[str, Any], w: Workload, reps: int) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """REPS rounds; in each, every engine does a decode run and a conversation, order swapped."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {"decode": [], "conversation": []} for name in sides
    }
    for i in range(reps):
        order = list(sides) if i % 2 == 0 else list(sides)[::-1]
        for name in order:
            side = sides[name]
            runs[name]["decode"].append(side.decode(w))
            conv = side.conversation(w, f"rep{i}") if name == "edgellm" else side.conversation(w)
            runs[name]["conversation"].append(conv)
    return runs


def serve_both(
    artifact: Path, gguf: Path, llama_python: Path, threads: int, w: Workload, reps: int
) -> dict[str, Any]:
    """Both engines at THREADS: RSS after load, peak RSS, medians of REPS interleaved rounds, ratios."""
    with ExitStack() as stack:
        daemon, dpid = stack.enter_context(daemon_process(artifact, threads))
        after_load = {"edgellm": rss(dpid)}
        llama = LlamaSide(llama_python, gguf, 2048, threads)
        stack.callback(llama.close)
        after_load["llama_cpp"] = rss(llama.proc.pid)
        samplers = {"edgellm": TreeSampler(dpid, 0.05), "llama_cpp": TreeSampler(llama.proc.pid, 0.05)}
        for s in samplers.values():
            stack.enter_context(s)
        runs = run_reps({"edgellm": daemon, "llama_cpp": llama}, w, reps)
    medians = summarize(runs)
    for name in medians:
        medians[name] |= {"rss_after_load": after_load[name], "peak_rss": samplers[name].peak}
    e, ll = medians["edgellm"], medians["llama_cpp"]
    ratios = {k: round(e[k] / ll[k], 3) for k in ("decode_tps", "prefill_tps", "rss_after_load", "peak_rss")}
    return {
        "threads": threads,
        "reps": reps,
        "engines": medians,
        "ratio_edgellm_over_llama": ratios,
        "runs": runs,
    }
