"""Every dashboard page renders with Streamlit's AppTest, on seeded data and on an empty database."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from finops.costmodel import CENT
from finops.db import make_engine, session_factory, upgrade
from finops.prices import load_catalog
from finops.report import cost_report, fleet_summary
from finops.timeutil import utc_now
from tests import scenario

APP = str(Path(__file__).resolve().parents[1] / "dashboards" / "app.py")
PAGES = (
    "views/overview.py",
    "views/teams.py",
    "views/jobs.py",
    "views/idle.py",
    "views/quality.py",
    "views/prices.py",
    "views/planning.py",
)


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'dash.sqlite'}"
    monkeypatch.setenv("FINOPS_DATABASE_URL", url)
    upgrade(make_engine(url))
    return url


def _run(page: str) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=60)
    app.switch_page(page)
    return app.run()


@pytest.mark.parametrize("page", PAGES)
def test_pages_render_on_an_empty_database(database: str, page: str) -> None:
    app = _run(page)
    assert not app.exception


def test_overview_shows_the_report_numbers(database: str) -> None:
    scenario.seed_dashboard_database(database)
    app = _run("views/overview.py")
    assert not app.exception
    now = utc_now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    with session_factory(make_engine(database))() as session:
        summary = fleet_summary(cost_report(session, now - timedelta(days=7), now, "team"))
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["GPU capacity cost"] == f"{summary.capacity_cost.quantize(CENT):,} USD"
    assert metrics["Idle cost (waste)"] == f"{summary.idle_cost.quantize(CENT):,} USD"
    assert "alpha" in app.dataframe[0].value["team"].tolist()


def test_teams_and_idle_pages_list_the_seeded_rows(database: str) -> None:
    scenario.seed_dashboard_database(database)
    teams = _run("views/teams.py")
    assert not teams.exception
    assert set(teams.dataframe[0].value["team"]) == {"alpha", "__unmapped__", "__unallocated__"}
    idle = _run("views/idle.py")
    assert not idle.exception
    assert idle.dataframe[0].value["job"].tolist() == ["501"]


def _price_input(app: AppTest) -> float:
    (price,) = [w for w in app.number_input if w.label.startswith("Price per GPU-hour")]
    return float(price.value)


def test_planning_offers_the_measured_price_per_gpu_hour(database: str) -> None:
    assert _price_input(_run("views/planning.py")) == 2.50, "no ledger yet: the stated default"
    scenario.seed_dashboard_database(database)
    st.cache_data.clear()  # query results are cached for a minute; this test does not wait
    app = _run("views/planning.py")
    assert not app.exception
    now = utc_now().replace(minute=0, second=0, microsecond=0)
    with session_factory(make_engine(database))() as session:
        rows = cost_report(session, now - timedelta(days=30), now, "team")
    charged = sum((row.allocated_cost for row in rows), Decimal(0))
    gpu_hours = Decimal(sum(row.allocated_gpu_seconds for row in rows)) / 3600
    assert _price_input(app) == float((charged / gpu_hours).quantize(CENT))
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Inference: weights + KV cache"] == "31.2 GB"  # 7B bf16 = 14 GB + 8 x 2 GiB KV cache


def test_prices_page_lists_every_catalog_row_with_on_prem_parts(database: str) -> None:
    app = _run("views/prices.py")
    assert not app.exception
    frame = app.dataframe[0].value
    catalog = load_catalog()
    assert len(frame) == sum(len(model.prices) for model in catalog.models.values())
    h100 = frame[(frame["model"] == "H100-SXM-80GB") & (frame["pricing model"] == "on-prem")]
    current = h100[h100["from"] <= utc_now().date()].sort_values("from").iloc[-1]
    parts = catalog.onprem_parts("NVIDIA H100 80GB HBM3", utc_now())
    assert current["per GPU-hour"] == f"{parts.total.quantize(CENT):,} USD"
    assert current["capex"] == f"{parts.capex_per_hour.quantize(CENT):,} USD"
    assert current["energy"] == f"{parts.energy_per_hour.quantize(CENT):,} USD"


def test_data_quality_page_shows_coverage_and_the_node(database: str) -> None:
    scenario.seed_dashboard_database(database)
    st.cache_data.clear()
    app = _run("views/quality.py")
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["GPU-hours held by a job"] == "75.0%"  # 3 of the scenario's 4 GPU-hours
    assert app.dataframe[0].value["node"].tolist() == [scenario.NODE]


def test_jobs_page_lists_the_report_by_job(database: str) -> None:
    scenario.seed_dashboard_database(database)
    st.cache_data.clear()
    app = _run("views/jobs.py")
    assert not app.exception
    now = utc_now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    with session_factory(make_engine(database))() as session:
        rows = [r for r in cost_report(session, now - timedelta(days=7), now, "job") if r.key != "__unallocated__"]
    frame = app.dataframe[0].value
    assert sorted(frame["job"]) == sorted(r.key for r in rows)
    assert [Decimal(str(c)) for c in frame["cost (USD)"]] == sorted(
        (r.allocated_cost.quantize(CENT) for r in rows), reverse=True
    ), "most expensive first, to the cent"
