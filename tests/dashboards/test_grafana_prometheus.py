"""dashboards/: promtool checks the scrape config and rules; every PromQL expression of the Grafana dashboards and
the rules returns data from a real Prometheus scraping the fixture collector and the service."""

from __future__ import annotations

import json
import re
import subprocess
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client import start_http_server
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.budgets import set_budget
from finops.service.cost_metrics import CostMetrics
from finops.timeutil import utc_now
from finops.web.app import ServiceMetrics, create_app
from tests.support.environment import REPO_ROOT, debian_binary
from tests.support.node_fixture import fixture_node_registry
from tests.support.prometheus_server import prometheus, wait_for
from tests.support.servers import API_TOKEN, free_port, running

GRAFANA = REPO_ROOT / "dashboards" / "grafana"
PROMETHEUS = REPO_ROOT / "dashboards" / "prometheus"
DATASOURCE_UID = "prometheus"


def _dashboards() -> dict[str, dict[str, object]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(GRAFANA.glob("*.json"))}


def _grafana_expressions() -> list[tuple[str, str]]:
    """(where, expr) of every panel target, with Grafana's ``$__rate_interval`` as 1m."""
    found = []
    for name, dashboard in _dashboards().items():
        for panel in dashboard["panels"]:  # type: ignore[attr-defined]
            for target in panel["targets"]:
                found.append((f"{name}: {panel['title']}", target["expr"].replace("$__rate_interval", "1m")))
    return found


def _rule_expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load((PROMETHEUS / "rules.yml").read_text())
    return [(rule.get("alert") or rule["record"], rule["expr"]) for group in rules["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules_and_the_scrape_config(tmp_path: Path) -> None:
    promtool = debian_binary("promtool")
    rules = subprocess.run([promtool, "check", "rules", PROMETHEUS / "rules.yml"], capture_output=True, text=True)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    # The config names the paths it has in the container (this folder mounted at /etc/prometheus, the compose secrets
    # at /run/secrets); promtool checks that the bearer token's file exists, so a stand-in is made here.
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "prometheus_api_token").write_text("gfa_stand-in\n")
    config = (PROMETHEUS / "prometheus.yml").read_text()
    config = config.replace("/etc/prometheus/", f"{PROMETHEUS}/").replace("/run/secrets/", f"{secrets}/")
    (tmp_path / "prometheus.yml").write_text(config)
    checked = subprocess.run([promtool, "check", "config", tmp_path / "prometheus.yml"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_dashboards_are_provisioned_against_the_prometheus_datasource() -> None:
    dashboards = _dashboards()
    assert sorted(dashboards) == ["cost-budgets.json", "gpu-fleet.json", "node-fabric-storage.json"]
    assert len({d["uid"] for d in dashboards.values()}) == 3
    provisioned = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert [d["uid"] for d in provisioned["datasources"]] == [DATASOURCE_UID]
    for name, dashboard in dashboards.items():
        for panel in dashboard["panels"]:  # type: ignore[attr-defined]
            assert panel["datasource"]["uid"] == DATASOURCE_UID, f"{name}: {panel['title']}"
            assert panel["fieldConfig"]["defaults"]["unit"], f"{name}: {panel['title']} has no unit"
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])
    assert len(_grafana_expressions()) >= 20


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_expression_returns_data_from_a_real_prometheus(tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    binary = debian_binary("prometheus")
    collector_port, dead_port = free_port(), free_port()
    server, thread = start_http_server(collector_port, addr="127.0.0.1", registry=fixture_node_registry(tmp_path))
    metrics = ServiceMetrics()
    costs = CostMetrics(metrics.registry)
    with sessions.begin() as session:
        set_budget(session, "vision", Decimal("1000"), utc_now(), "USD", allow_unknown_team=True, actor="system:test")
    costs.refresh(sessions)
    try:
        with running(create_app(sessions, "token", metrics, api_token=API_TOKEN)) as service:
            assert httpx.post(f"{service}/api/v1/ingest", content=b"{}").status_code == 401  # counted by code
            jobs = {
                "gpu-finops-collector": [f"127.0.0.1:{collector_port}", f"127.0.0.1:{dead_port}"],
                "gpu-finops-service": [service.removeprefix("http://")],
            }
            rules, bearer = [PROMETHEUS / "rules.yml"], {"gpu-finops-service": API_TOKEN}
            with prometheus(binary, tmp_path, jobs, rule_files=rules, bearer=bearer) as url:
                for where, expr in _grafana_expressions() + _rule_expressions():
                    assert wait_for(url, expr, timeout_seconds=60), f"{where}: {expr}"
                lost = wait_for(url, "gpufinops_gpu_up == 0")
                assert [r["metric"]["gpu"] for r in lost] == ["2"]
                down = wait_for(url, 'up{job="gpu-finops-collector"} == 0')
                assert [r["metric"]["instance"] for r in down] == [f"127.0.0.1:{dead_port}"]
                throttled = wait_for(url, re.sub(r"\s+", " ", dict(_rule_expressions())["GpuThermalThrottling"]))
                assert [r["metric"]["gpu"] for r in throttled] == ["1"]
    finally:
        server.shutdown()
        thread.join(timeout=10)
