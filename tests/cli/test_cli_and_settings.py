"""The command line's help on every command, settings from the environment and secret files, the scheduler, and
``gpu-finops report``'s filters (those of the dashboard)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError
from sqlalchemy import func, select
from typer.main import get_command
from typer.testing import CliRunner

from finops.analysis.idle import IdlePolicy
from finops.analysis.report import cost_report
from finops.analysis.report_format import report_dicts
from finops.cli import app
from finops.cli.base import command_tree
from finops.db.engine import make_engine, session_factory, upgrade
from finops.db.ledger_tables import LedgerEntry
from finops.ingest.readings import Ingestor
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.service.cost_metrics import CostMetrics
from finops.service.scheduler import start_scheduler
from finops.settings.combined import Settings
from tests.support import scenario
from tests.support.servers import API_TOKEN, free_port, service_metrics
from tests.support.two_clusters import seed_two_clusters


def _command_paths() -> list[list[str]]:
    return [path for path, _ in command_tree(get_command(app), [])]


def test_every_command_has_help() -> None:
    paths = _command_paths()
    assert ["import", "sacct"] in paths and ["demo"] in paths and ["budget", "set"] in paths
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output


def test_token_from_file_and_not_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    monkeypatch.setenv("FINOPS_INGEST_TOKEN_FILE", str(secret))
    settings = Settings()
    assert settings.ingest_token is not None and settings.ingest_token.get_secret_value() == "from-file"
    assert "from-file" not in repr(settings)
    monkeypatch.setenv("FINOPS_INGEST_TOKEN", "inline")
    with pytest.raises(ValidationError, match="not both"):
        Settings()


def test_default_database_is_sqlite_in_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINOPS_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("FINOPS_DATABASE_URL", raising=False)
    assert Settings().effective_database_url == f"sqlite:///{tmp_path / 'gpu-finops.sqlite'}"


def test_scheduler_rolls_up_the_ledger_in_the_background(sessions) -> None:  # type: ignore[no-untyped-def]
    t0 = scenario.start_hour()
    batch = scenario.batch(t0)
    with sessions.begin() as session:
        Ingestor().store(session, batch)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    scheduler = start_scheduler(sessions, pricing, IdlePolicy(), CostMetrics(CollectorRegistry()), 3600)
    try:
        deadline = time.monotonic() + 30
        while True:
            with sessions() as session:
                hours = session.scalar(
                    select(func.count(func.distinct(LedgerEntry.hour))).where(
                        LedgerEntry.hour < t0 + timedelta(hours=2)
                    )
                )
            if hours == 2:
                break
            assert time.monotonic() < deadline, "the scheduled rollup did not build the ledger"
            time.sleep(0.2)
    finally:
        scheduler.shutdown()


def test_scheduler_command_serves_budget_gauges(tmp_path: Path) -> None:
    database = {"FINOPS_DATABASE_URL": f"sqlite:///{tmp_path / 'finops.sqlite'}"}
    env = {**os.environ, **database, "FINOPS_API_TOKEN": API_TOKEN}
    for args in (["db", "upgrade"], ["budget", "set", "vision", "1000", "--yes"]):
        subprocess.run([sys.executable, "-m", "finops.cli", *args], env=env, check=True, capture_output=True)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "finops.cli", "scheduler", "--metrics-port", str(port)], env=env)
    try:
        deadline = time.monotonic() + 30
        text = ""
        while 'gpufinops_budget_used_ratio{project="",team="vision"}' not in text:
            assert time.monotonic() < deadline and process.poll() is None, "no budget gauge on the scheduler's /metrics"
            with contextlib.suppress(httpx.TransportError, httpx.HTTPStatusError):
                text = service_metrics(f"http://127.0.0.1:{port}")
            time.sleep(0.2)
        assert 'gpufinops_budget_used_ratio{project="",team="vision"} 0.0' in text, "nothing spent yet"
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 401  # every team's budgets: a token
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200  # for health checks: none
    finally:
        process.terminate()
        process.wait(timeout=30)


REPORT_FILTERS: list[dict[str, str]] = [
    {"cluster": "vega"},
    {"team": "alpha"},
    {"partition": "gpu"},
    {"cluster": "orion", "team": "alpha", "partition": "gpu"},
]


def test_report_filters_give_the_cost_report_of_the_same_filters(database_url: str) -> None:
    upgrade(make_engine(database_url))
    t0 = seed_two_clusters(database_url)
    start, end = t0, t0 + timedelta(hours=2)
    runner = CliRunner()
    env = {"FINOPS_DATABASE_URL": database_url}
    period = ["report", "--start", start.isoformat(), "--end", end.isoformat()]
    with session_factory(make_engine(database_url))() as session:
        for by in ("team", "job"):
            everything = report_dicts(cost_report(session, start, end, by), by)
            for filters in REPORT_FILTERS:
                options = [part for name, value in filters.items() for part in (f"--{name}", value)]
                result = runner.invoke(app, [*period, "--by", by, "--format", "json", *options], env=env)
                assert result.exit_code == 0, result.output
                expected = report_dicts(cost_report(session, start, end, by, **filters), by)  # type: ignore[arg-type]
                current = [{**row, "ledger_hours_pending": 0, "ledger_stale": None} for row in expected]
                assert json.loads(result.stdout) == current, (by, filters)
                assert expected and expected != everything, "the filter narrows the seeded report"
    whole = runner.invoke(app, period, env=env).output
    assert "Budgets, month to date:" in whole and "\nalpha " in whole
    vega = runner.invoke(app, [*period, "--cluster", "vega"], env=env).output
    assert "Budgets, month to date (whole teams: all clusters and partitions):\n" in vega and "\nalpha " in vega
    assert "\ngamma " in vega and "\nalpha " not in vega.split("Budgets")[0], "the costs are those of vega"
    assert "Budgets" not in runner.invoke(app, [*period, "--team", "gamma"], env=env).output, "gamma has none"
    alpha = runner.invoke(app, [*period, "--team", "alpha", "--format", "csv"], env=env).output
    assert alpha.splitlines()[1].startswith("alpha,") and len(alpha.splitlines()) == 2
