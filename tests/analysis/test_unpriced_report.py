"""Unpriced GPU-hours are visible wherever costs are shown, never dropped and never folded into money: the cost
report (rows, JSON, CSV, table), the CLI's ``report`` and ``rollup``, the REST API's ``/costs``, the dashboard's
ledger cube and the service's ``/metrics`` (tests/support/unpriced.py: one priced H100, one GPU of a model the
catalog does not price)."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from finops.analysis.dashboard_queries import ledger_cube
from finops.analysis.report import cost_report, unpriced_by_model
from finops.analysis.report_format import report_csv, report_dicts, report_table
from finops.cli import app
from finops.db.models import UNALLOCATED_TEAM, UNMAPPED_TEAM
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.service.cost_metrics import CostMetrics
from finops.timeutil import month_start, to_epoch, utc_now
from finops.web.app import create_app
from tests.support import scenario, unpriced
from tests.support.servers import running

MODEL = unpriced.UNPRICED_MODEL
H100 = load_catalog().model_for(scenario.MODEL)
TOKEN = "unpriced-token"


@pytest.fixture
def slice_(sessions: sessionmaker[Session]) -> tuple[sessionmaker[Session], datetime, Decimal]:
    """The slice with one unpriced GPU, rolled up; (sessions, T, the H100's rate)."""
    t0 = scenario.start_hour()
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        unpriced.load(session, t0)
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    return sessions, t0, pricing.catalog.rate(scenario.MODEL, PricingModel.ON_DEMAND, t0)


def test_report_counts_unpriced_gpu_hours_by_model_and_costs_only_the_priced(slice_) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, rate = slice_
    end = t0 + timedelta(hours=2)
    with sessions() as session:
        teams = {row.key: row for row in cost_report(session, t0, end)}
        models = {row.key: row for row in cost_report(session, t0, end, "gpu_model", catalog=load_catalog())}
        found = unpriced_by_model(session, t0, end)
        cube = {row.key: row for row in ledger_cube(session, t0, end).report("team")}
    assert [(u.model, u.gpu_seconds) for u in found] == [(MODEL, 7200)]
    assert "gpu-finops prices import" in found[0].fix and "set the node's model" in found[0].fix
    assert sum((row.allocated_cost for row in teams.values()), Decimal(0)) == 2 * rate  # the H100's capacity only
    assert sum(row.allocated_gpu_seconds for row in teams.values()) == 4 * 3600  # both GPUs' hours
    assert {key: row.unpriced_gpu_seconds for key, row in teams.items()} == {
        "alpha": 0,
        UNMAPPED_TEAM: 5400,
        UNALLOCATED_TEAM: 1800,
    }
    assert {key: row.unpriced_gpu_seconds for key, row in cube.items()} == {
        key: row.unpriced_gpu_seconds for key, row in teams.items()
    }
    assert teams[UNMAPPED_TEAM].unpriced_only and teams[UNMAPPED_TEAM].used_gpu_seconds == pytest.approx(2700)
    assert models[MODEL].unpriced_only and not models[H100].unpriced_only

    dicts = {d["gpu_model"]: d for d in report_dicts(list(models.values()), "gpu_model")}
    assert dicts[MODEL]["allocated_cost"] is None and dicts[MODEL]["unpriced_gpu_hours"] == 2.0
    assert dicts[H100]["allocated_cost"] == str((2 * rate).quantize(Decimal("0.01")))
    rows = list(csv.DictReader(io.StringIO(report_csv(list(teams.values())))))
    assert {row["team"]: row["unpriced_gpu_hours"] for row in rows} == {
        "alpha": "0.0",
        UNMAPPED_TEAM: "1.5",
        UNALLOCATED_TEAM: "0.5",
    }
    assert {row["team"]: row["allocated_cost"] for row in rows}[UNMAPPED_TEAM] == ""  # unknown, not 0
    table = report_table(list(teams.values()), "team", found)
    total = next(line for line in table.splitlines() if line.startswith("TOTAL"))
    assert total.endswith(f"+ 2.00 unpriced GPU-hours (models {MODEL})")
    assert "unpriced GPU-h" in table and "unpriced" in table.splitlines()[3]  # __unmapped__: cost unknown
    assert f"unpriced: 2.00 GPU-hours of {MODEL}: add a price for '{MODEL}'" in table


def test_cli_report_and_rollup_say_what_is_unpriced(database_url: str, sessions: sessionmaker[Session]) -> None:
    t0 = scenario.start_hour()
    with sessions.begin() as session:
        unpriced.load(session, t0)
    runner = CliRunner()
    env = {"FINOPS_DATABASE_URL": database_url}
    built = runner.invoke(app, ["rollup"], env=env)
    assert built.exit_code == 0, built.output
    assert "GPU-hours priced" in built.stdout and "unpriced" in built.stdout
    assert f"GPU-hours of {MODEL}: add a price for '{MODEL}'" in built.stderr
    period = ["report", "--start", t0.isoformat(), "--end", (t0 + timedelta(hours=2)).isoformat()]
    table = runner.invoke(app, period, env=env)
    assert table.exit_code == 0, table.output
    assert f"+ 2.00 unpriced GPU-hours (models {MODEL})" in table.stdout
    as_json = runner.invoke(app, [*period, "--by", "gpu_model", "--format", "json"], env=env)
    rows = {row["gpu_model"]: row for row in json.loads(as_json.stdout)}
    assert rows[MODEL]["unpriced_gpu_hours"] == 2.0 and rows[MODEL]["allocated_cost"] is None
    assert f"unpriced: 2.00 GPU-hours of {MODEL}" in as_json.stderr
    as_csv = runner.invoke(app, [*period, "--format", "csv"], env=env)
    assert "unpriced_gpu_hours" in as_csv.stdout.splitlines()[0] and MODEL in as_csv.stderr


def test_rest_costs_and_metrics_show_the_unpriced_gpu_hours(slice_) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _ = slice_
    params = {"start": t0.isoformat(), "end": (t0 + timedelta(hours=2)).isoformat()}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as url:
        body = httpx.get(f"{url}/api/v1/costs", params={**params, "group_by": "gpu_model"}, headers=auth).json()
        as_csv = httpx.get(f"{url}/api/v1/costs", params={**params, "format": "csv"}, headers=auth)
    assert [(u["model"], u["gpu_hours"]) for u in body["unpriced"]] == [(MODEL, 2.0)]
    assert "gpu-finops prices import" in body["unpriced"][0]["fix"]
    assert {row["gpu_model"]: row["allocated_cost"] for row in body["rows"]}[MODEL] is None
    assert as_csv.headers["X-Unpriced-GPU-Hours"] == f"{MODEL}=2.0"
    assert "unpriced_gpu_hours" in as_csv.text.splitlines()[0]

    registry = CollectorRegistry()
    CostMetrics(registry).refresh(sessions)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    in_month = sum(1.0 for hour in (t0, t0 + timedelta(hours=1)) if hour >= month_start(utc_now())) or None
    assert samples.get(("gpufinops_unpriced_gpu_hours", (("model", MODEL),))) == in_month
    documented = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    assert "`gpufinops_unpriced_gpu_hours{model}`" in documented
