"""The Prometheus config and Grafana dashboard under deploy/ name only metrics the gateway exports."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; types-PyYAML is not a dependency
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import StartDaemon, StartGateway, keyed_http, sdk, telemetry_read

MONITORING = resources.files("edgellm.deploy") / "monitoring"
METRIC = re.compile(r"\b(?:edgellm_|llamacpp:)[a-z_:]+")


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]] + [
        v["definition"] for v in dashboard["templating"]["list"] if "definition" in v
    ]


@pytest.mark.parametrize(
    ("dashboard_file", "at_least"), [("grafana-dashboard.json", 15), ("grafana-fleet-dashboard.json", 8)]
)
async def test_every_metric_on_the_dashboard_is_exported(
    start_daemon: StartDaemon, start_gw: StartGateway, dashboard_file: str, at_least: int
) -> None:
    # The virtual phone gives the (fake-engine) daemon temperatures and clusters to report.
    gw = await start_gw(await start_daemon(virtual_phone="sd8gen3"))
    async with sdk(gw) as client:
        await client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
    await telemetry_read(gw)
    async with keyed_http(gw) as http:
        text = (await http.get("/metrics")).text
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    dashboard = json.loads((MONITORING / dashboard_file).read_text())
    used = {m for e in _exprs(dashboard) for m in METRIC.findall(e)}
    assert len(used) >= at_least
    assert used - exported == set()


def test_the_scrape_config_labels_each_phone() -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"  # the gateway requires its key on /metrics
    groups = job["static_configs"]
    assert len(groups) >= 2 and all(g["labels"]["device"] for g in groups)
