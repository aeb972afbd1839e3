"""`edgellm jobs quantize|eval|scan|deploy|watch|list|artifacts`: run host jobs on a (remote) host service.

`edgellm host` starts the service; these commands submit a job to it and follow the progress it
streams. Paths are paths on the service's machine (`default` = its cached default artifact).
Ctrl-C only stops following: the job keeps running, and `edgellm jobs watch JOB_ID` re-attaches.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from edgellm.client.connect_args import security_from
from edgellm.client.failures import BAD_INPUT, FAILED, HOST_SERVICE, INTERRUPTED, OK
from edgellm.client.host_client import HostClient, JobOutcome, follow, outcome
from edgellm.client.job_summary import summary
from edgellm.common.argtypes import float_in, int_in, non_negative_int
from edgellm.common.security_args import add_client_security
from edgellm.common.targets import DEFAULT_HOST_TARGET, HOST_TARGET_ENV, TARGET_ENV
from edgellm.v1 import host_pb2

_BAD_INPUT_ERRORS = ("INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "OUT_OF_RANGE")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `jobs` subcommand and its verbs."""
    p = sub.add_parser("jobs", help="run quantize/eval/scan/deploy on a host service and follow progress")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    q = _verb(verbs, "quantize", "quantize a model on the host (RTN/AWQ/GPTQ, plans, auto budget)")
    q.add_argument("--model", default="default", help="'default' or a Hugging Face directory on the host")
    q.add_argument("--method", choices=("rtn", "awq", "gptq"), default="gptq", help="quantization algorithm")
    q.add_argument("--bits", type=int, choices=(4, 8), default=4, help="weight bits")
    q.add_argument(
        "--block", type=non_negative_int, default=64, help="block size along the input; 0 = per channel"
    )
    q.add_argument("--plan", default="int4", help="int4 | int8 | mixed | auto | a plan JSON document")
    q.add_argument(
        "--ppl-budget", type=float_in(0.0, 1.0), default=0.0, help="for --plan auto: relative, e.g. 0.03"
    )
    q.add_argument("-o", "--output", required=True, help="artifact directory to create on the host")
    q.set_defaults(handler=run_quantize)

    e = _verb(verbs, "eval", "perplexity / top-1 / KL of an artifact on the host")
    e.add_argument("artifact", help="artifact directory on the host, or 'default'")
    e.add_argument("--tokens", type=int_in(2), default=2048, help="evaluation tokens of wikitext2-test")
    e.add_argument("--text", default="", help="evaluation text on the host (default: wikitext2-test)")
    e.set_defaults(handler=run_eval)

    s = _verb(verbs, "scan", "check an artifact's operators against a backend, on the host")
    s.add_argument("artifact", help="artifact directory (or .mnn file) on the host, or 'default'")
    s.add_argument("--backend", choices=("cpu", "opencl", "vulkan", "npu"), default="cpu", help="MNN backend")
    s.add_argument("--allow-fallback", action="store_true", help="succeed even if ops fall back to the CPU")
    s.set_defaults(handler=run_scan)

    d = _verb(verbs, "deploy", "push an artifact from the host to a device daemon, load it, try it")
    d.add_argument("artifact", help="artifact directory on the host, or 'default'")
    d.add_argument(
        "--device",
        default="",
        metavar="HOST[:PORT]",
        help=f"the daemon as the host reaches it (default: the host's ${TARGET_ENV}, then 127.0.0.1:50051)",
    )
    d.set_defaults(handler=run_deploy)

    w = _verb(verbs, "watch", "re-attach to a job: replay its progress, then follow it")
    w.add_argument("job_id", help="the id a job command printed (e.g. quantize-1a2b3c4d5e6f)")
    w.set_defaults(handler=run_watch)

    a = _verb(verbs, "artifacts", "list the artifacts in the host's cache")
    a.set_defaults(handler=run_artifacts)

    ls = _verb(
        verbs,
        "list",
        "list the host's jobs (running, queued, finished in the last hour): id, kind, state, age",
    )
    ls.set_defaults(handler=run_list)


def _verb(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], name: str, text: str
) -> argparse.ArgumentParser:
    p = verbs.add_parser(name, help=text)
    p.add_argument(
        "--target",
        default=None,
        metavar="HOST[:PORT]",
        help=f"host service address (default: ${HOST_TARGET_ENV}, then {DEFAULT_HOST_TARGET}; "
        "port 50052 when omitted)",
    )
    add_client_security(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    if name not in ("watch", "artifacts", "list"):
        p.add_argument(
            "--detach",
            action="store_true",
            help="print the job id and return at once; the job keeps running on the host "
            "(follow it with `edgellm jobs watch JOB_ID`)",
        )
    p.set_defaults(peer_kind=HOST_SERVICE)
    return p


def run_quantize(ns: argparse.Namespace) -> int:
    """Submit a Quantize job."""
    request = host_pb2.QuantizeRequest(
        model=ns.model,
        method=ns.method,
        bits=ns.bits,
        block=ns.block,
        plan=ns.plan,
        ppl_budget=ns.ppl_budget,
        output_dir=ns.output,
    )
    return _run(ns, "quantize", request)


def run_eval(ns: argparse.Namespace) -> int:
    """Submit an Evaluate job."""
    return _run(
        ns,
        "evaluate",
        host_pb2.EvaluateRequest(artifact_dir=ns.artifact, text_file=ns.text, tokens=ns.tokens),
    )


def run_scan(ns: argparse.Namespace) -> int:
    """Submit a ScanOperators job."""
    return _run(ns, "scan", host_pb2.ScanOperatorsRequest(artifact_dir=ns.artifact, backend=ns.backend))


def run_deploy(ns: argparse.Namespace) -> int:
    """Submit a Deploy job."""
    return _run(ns, "deploy", host_pb2.DeployRequest(artifact_dir=ns.artifact, target=ns.device))


def run_watch(ns: argparse.Namespace) -> int:
    """Follow an existing job."""
    return _run(ns, "watch", host_pb2.WatchJobRequest(job_id=ns.job_id))


def run_artifacts(ns: argparse.Namespace) -> int:
    """List the host's artifacts."""
    from edgellm.client.jsonout import message_dict

    with HostClient(ns.target, security_from(ns)) as client:
        resp = client.artifacts()
    if ns.json:
        rows = [{k: v for k, v in message_dict(a).items() if k != "manifest_json"} for a in resp.artifacts]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return OK
    for a in resp.artifacts:
        sys.stdout.write(
            f"{a.artifact_id[:12]}  {a.name:<28} {a.quantization:<12} {a.size_bytes / 1e6:8.1f} MB\n"
        )
    if not resp.artifacts:
        sys.stdout.write("no artifacts in the host's cache\n")
    return OK


def run_list(ns: argparse.Namespace) -> int:
    """List the host's jobs, oldest first."""
    from edgellm.client.jsonout import message_dict

    with HostClient(ns.target, security_from(ns)) as client:
        jobs = list(client.jobs().jobs)
    if ns.json:
        sys.stdout.write(json.dumps([message_dict(j) for j in jobs], indent=2) + "\n")
        return OK
    if not jobs:
        sys.stdout.write("no jobs on the host service (finished ones are kept for an hour)\n")
        return OK
    sys.stdout.write(f"{'JOB ID':<26} {'KIND':<9} {'STATE':<8} {'AGE':>7}  STAGE\n")
    for j in jobs:
        stage = f"{j.stage} ({100 * j.fraction:.0f}%)" if j.state == "running" else j.stage
        sys.stdout.write(f"{j.job_id:<26} {j.kind:<9} {j.state:<8} {_age(j.age_seconds):>7}  {stage}\n")
    return OK


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


class _Progress:
    """A progress bar on a terminal; one line per stage change into a pipe or a log file."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.bar: Any = None
        self.stage = ""

    def update(self, event: host_pb2.JobEvent) -> None:
        p = event.progress
        if not sys.stderr.isatty():
            if p.stage != self.stage:
                self.stage = p.stage
                # The last event is stage "done", message "done": one word, not "done: done".
                text = p.stage if p.message in ("", p.stage) else f"{p.stage}: {p.message}"
                sys.stderr.write(f"[{100 * p.fraction:3.0f}%] {text}\n")
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(
                total=1.0, desc=self.kind, bar_format="{l_bar}{bar}| {elapsed}<{remaining} {postfix}"
            )
        self.bar.n = round(p.fraction, 4)
        self.bar.set_postfix_str(f"{p.stage}: {p.message}"[:60], refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _text(result: JobOutcome, as_json: bool) -> str:
    """The result as the legacy JSON document (--json, or from a host service too old to send it typed)."""
    if as_json or result.typed is None:
        return json.dumps(result.result, indent=2)
    return summary(result.typed)


def _run(ns: argparse.Namespace, kind: str, request: Any) -> int:
    """Submit (or watch), show progress on stderr, print the result; exit status from the outcome."""
    job_id = ""
    last: host_pb2.JobEvent | None = None
    progress = _Progress(kind)
    with HostClient(ns.target, security_from(ns)) as client:
        try:
            for event in follow(client.start(kind, request)):
                if not job_id:
                    job_id = event.job_id
                    if getattr(ns, "detach", False):
                        sys.stdout.write(f"{job_id}\n")
                        return OK
                    sys.stderr.write(f"job {job_id} on {client.target}\n")
                progress.update(event)
                last = event
        except KeyboardInterrupt:
            progress.close()
            if job_id:
                sys.stderr.write(f"stopped following; the job runs on: `edgellm jobs watch {job_id}`\n")
            return INTERRUPTED
        finally:
            progress.close()
    assert last is not None  # follow() raises unless a last (done) event came
    result = outcome(last)
    if result.error:
        # The host words its error "CODE: message"; the code is for programs (--json), not people.
        message = result.error.removeprefix(f"{result.error_code}: ") if result.error_code else result.error
        sys.stderr.write(f"edgellm jobs {ns.verb}: job {result.job_id} failed: {message}\n")
        return BAD_INPUT if result.error_code in _BAD_INPUT_ERRORS else FAILED
    sys.stdout.write(_text(result, ns.json) + "\n")
    return _fallback_status(ns, result)


def _fallback_status(ns: argparse.Namespace, result: JobOutcome) -> int:
    """As the local `edgellm scan`: operators that fall back to the CPU exit 1 unless --allow-fallback."""
    scanned = result.typed if isinstance(result.typed, host_pb2.ScanResult) else None
    if scanned is None or not scanned.fallback or getattr(ns, "allow_fallback", True):
        return OK
    sys.stderr.write(
        f"edgellm jobs scan: {scanned.backend} cannot run {', '.join(scanned.fallback)}; "
        "pass --allow-fallback to run them on the CPU\n"
    )
    return FAILED
