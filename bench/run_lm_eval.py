"""Run the real lm-evaluation-harness on the gateway and on the torch reference, with one command.

Starts a daemon on the artifact and a gateway in front of it with a fresh API key (as a user would
run it), runs `lm_eval --model local-completions` against the gateway's /v1/completions (the key in
OPENAI_API_KEY, which local-completions sends as a bearer token), stops both, then runs
`lm_eval --model hf` on the artifact's fp checkpoint, and prints both accuracies with their standard
errors. lm_eval lives in its own virtual environment (it is not an edgellm dependency; it pins its
own torch, datasets and transformers), made once:

    python3.11 -m venv .cache/bench-venvs/lm-eval
    .cache/bench-venvs/lm-eval/bin/pip install "lm_eval[api,hf]==0.4.13" torch==2.13.0

Usage (from the repository root; the task's data_files path is relative to it):
    .venv/bin/python -m bench.run_lm_eval --artifact .cache/artifacts/default --out-dir DIR
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.servers import free_port, serve

LM_EVAL = Path(".cache/bench-venvs/lm-eval/bin/lm_eval")
TASK_DIR = Path(__file__).parent / "lm_eval_task"


def lm_eval(binary: Path, model: str, model_args: dict[str, Any], ns: argparse.Namespace, out: Path,
            env: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """Run one lm_eval evaluation at nice 10; its results JSON (the newest under `out`)."""
    args = ",".join(f"{k}={v}" for k, v in model_args.items())
    argv = ["nice", "-n", "10", str(binary), "--model", model, "--model_args", args]
    argv += ["--tasks", ns.task, "--include_path", str(TASK_DIR), "--output_path", str(out)]
    argv += ["--log_samples", *(["--limit", str(ns.limit)] if ns.limit else [])]
    argv += ["--device", "cpu"] if model == "hf" else []
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, env={**os.environ, **env}, check=True)
    newest = max(out.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    return dict(json.loads(newest.read_text()), path=str(newest))


def on_gateway(ns: argparse.Namespace, hf_dir: Path, offline: dict[str, str]) -> dict[str, Any]:
    """lm_eval's local-completions against a keyed gateway in front of a daemon on the artifact."""
    work = Path(tempfile.mkdtemp(prefix="lm-eval-"))
    key = work / "gateway-key"
    key.write_text(secrets.token_urlsafe(24))
    key.chmod(0o600)  # the gateway refuses a key file others can read
    dport, gport = free_port(), free_port()
    target = f"127.0.0.1:{dport}"
    edgellm = [sys.executable, "-m", "edgellm"]
    daemon_argv = [*edgellm, "daemon", "--port", str(dport), "--model", str(ns.artifact)]
    daemon_argv += ["--data-dir", str(work / "data"), "--insecure-loopback"]
    gateway_argv = [*edgellm, "gateway", "--target", target, "--port", str(gport)]
    gateway_argv += ["--api-key-file", str(key), "--insecure-loopback"]
    model_args = {
        "base_url": f"http://127.0.0.1:{gport}/v1/completions", "model": ns.model,
        "tokenizer_backend": "huggingface", "tokenizer": hf_dir,
        "num_concurrent": 1, "max_retries": 1,
    }  # fmt: skip
    with (
        serve("daemon", daemon_argv, target, nice=10),
        serve("gateway", gateway_argv, f"http://127.0.0.1:{gport}/health", nice=10),
    ):
        env = {**offline, "OPENAI_API_KEY": key.read_text()}
        return lm_eval(ns.lm_eval, "local-completions", model_args, ns, ns.out_dir / "gateway", env)


def summary(result: dict[str, Any], task: str) -> dict[str, Any]:
    """acc, its standard error, the sample count and lm_eval's own timing from a results JSON."""
    r = result["results"][task]
    return {
        "acc": round(r["acc,none"], 4), "acc_stderr": round(r["acc_stderr,none"], 4),
        "n": r.get("sample_len"), "seconds": round(float(result["total_evaluation_time_seconds"]), 1),
        "lm_eval_version": result.get("lm_eval_version"), "results": result["path"],
    }  # fmt: skip


def main() -> None:
    """Score the task on the gateway, then on torch; print both."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", type=Path, required=True)
    ap.add_argument("--hf-dir", type=Path, help="the fp checkpoint (default: the default model's)")
    ap.add_argument("--lm-eval", type=Path, default=LM_EVAL, help=f"lm_eval executable (default {LM_EVAL})")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="the name sent as `model`")
    ap.add_argument("--task", default="edgellm_facts")
    ap.add_argument("--limit", type=int, help="first N documents only (a smoke run; not a metric)")
    ap.add_argument("--skip-hf", action="store_true", help="only the gateway")
    ap.add_argument("--out-dir", type=Path, required=True, help="lm_eval's result and sample files")
    ns = ap.parse_args()
    if not ns.lm_eval.exists():
        raise SystemExit(f"no lm_eval at {ns.lm_eval}: make its venv first (see this script's docstring)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the servers
    from edgellm.host.builder.source import checkpoint, resolve_source

    hf_dir = (ns.hf_dir or checkpoint(resolve_source("default"))).resolve()
    # Why offline: the checkpoint and the task's data are local; nothing may reach the Hub.
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = {"gateway": summary(on_gateway(ns, hf_dir, offline), ns.task)}
    if not ns.skip_hf:
        fp = {"pretrained": hf_dir, "dtype": "float32"}
        hf = lm_eval(ns.lm_eval, "hf", fp, ns, ns.out_dir / "hf", offline)
        out["torch"] = summary(hf, ns.task)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
