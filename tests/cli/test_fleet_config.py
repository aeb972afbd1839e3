"""`edgellm fleet config`: the LiteLLM proxy config and the Prometheus scrape config it writes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; types-PyYAML is not a dependency

from tests.cli.conftest import Result

Run = Callable[..., Result]
THREE = ("--target", "cool=127.0.0.1:8080", "--target", "warm=127.0.0.1:8081", "--target", "10.0.0.7:8443")
# LiteLLM lives in its own venv (about 60 packages; never in the project's): bench/bench_fleet.py.
LITELLM_VENV = Path(
    os.environ.get("EDGELLM_LITELLM_VENV", Path(__file__).resolve().parents[2] / ".cache/bench-venvs/litellm")
)


def test_it_writes_one_deployment_per_gateway_and_a_labelled_scrape_target_each(
    edgellm: Run, tmp_path: Path
) -> None:
    out = tmp_path / "litellm.yaml"
    r = edgellm("fleet", "config", *THREE, "--model", "m", "--key-env", "FLEET_KEY", "-o", str(out))
    assert r.code == 0, r.err
    config = yaml.safe_load(out.read_text())
    pool = [d for d in config["model_list"] if d["model_name"] == "m"]
    assert [d["litellm_params"]["api_base"] for d in pool] == [
        "http://127.0.0.1:8080/v1", "http://127.0.0.1:8081/v1", "http://10.0.0.7:8443/v1",
    ]  # fmt: skip
    assert {d["litellm_params"]["api_key"] for d in pool} == {"os.environ/FLEET_KEY"}
    assert {d["litellm_params"]["model"] for d in pool} == {"openai/m"}
    assert [d["model_info"]["id"] for d in pool] == ["cool", "warm", "10.0.0.7-8443"]
    router = config["router_settings"]
    assert router["allowed_fails"] == 0 and router["num_retries"] >= 1 and router["cooldown_time"] > 0
    assert {"m@cool": ["m"]} in router["fallbacks"]
    prom = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    (job,) = prom["scrape_configs"]
    labels = {g["targets"][0]: g["labels"]["device"] for g in job["static_configs"]}
    assert labels == {"127.0.0.1:8080": "cool", "127.0.0.1:8081": "warm", "10.0.0.7:8443": "10.0.0.7-8443"}
    assert job["authorization"]["type"] == "Bearer"


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("127.0.0.1:99999", "within 1..65535"),
        ("127.0.0.1:http", "within 1..65535"),
        ("127.0.0.1", "expected HOST:PORT"),
        ("bad name=127.0.0.1:8080", "device label"),
    ],
)
def test_a_bad_target_is_refused_with_exit_2_naming_it(
    edgellm: Run, tmp_path: Path, target: str, says: str
) -> None:
    r = edgellm("fleet", "config", "--target", target, "-o", str(tmp_path / "l.yaml"))
    assert r.code == 2 and says in r.err and repr(target) in r.err
    assert not (tmp_path / "l.yaml").exists()


def test_a_label_twice_or_an_existing_file_is_refused(edgellm: Run, tmp_path: Path) -> None:
    out = tmp_path / "l.yaml"
    twice = edgellm("fleet", "config", "--target", "a=h:1", "--target", "a=h:2", "-o", str(out))
    assert twice.code == 2 and "device label a is given twice" in twice.err
    assert edgellm("fleet", "config", "--target", "h:1", "-o", str(out)).code == 0
    again = edgellm("fleet", "config", "--target", "h:1", "-o", str(out))
    assert again.code == 2 and "--force" in again.err
    assert edgellm("fleet", "config", "--target", "h:1", "-o", str(out), "--force").code == 0


@pytest.mark.skipif(
    not (LITELLM_VENV / "bin/python").exists(), reason="no LiteLLM venv (bench/bench_fleet.py)"
)
def test_litellm_builds_its_router_from_the_config(edgellm: Run, tmp_path: Path) -> None:
    out = tmp_path / "litellm.yaml"
    assert edgellm("fleet", "config", *THREE, "-o", str(out)).code == 0
    probe = (
        "import json, sys, yaml; from litellm import Router; c = yaml.safe_load(open(sys.argv[1])); "
        "r = Router(model_list=c['model_list'], **c['router_settings']); "
        "print(json.dumps([r.routing_strategy, len(r.model_list), r.allowed_fails, r.num_retries]))"
    )
    done = subprocess.run(
        [str(LITELLM_VENV / "bin/python"), "-c", probe, str(out)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "EDGELLM_GATEWAY_API_KEY": "k"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["least-busy", 6, 0, 3]
