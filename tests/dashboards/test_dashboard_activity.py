"""The dashboard shows useful work as the hardware measures it (dashboards/activity.py) on the slice of
tests/support/activity_scenario.py: job 601 profiled throughout, 602 never, 603 half its hour, so team vision is
measured and team nlp is not. The Overview's kernel-busy and SM-active costs, the Teams and Jobs pages' activity
columns and the chart of utilisation against SM activity are those of ``finops.analysis.report.cost_report``; what
was not measured says so, never 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from playwright.sync_api import expect
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from dashboards import activity
from dashboards.filters import period_bounds
from finops.analysis.dashboard_queries import ledger_cube
from finops.analysis.report import NOT_MEASURED, cost_report, fleet_summary
from finops.analysis.report_format import report_dicts
from finops.db.engine import make_engine, session_factory, upgrade
from finops.db.models import UNALLOCATED_TEAM
from finops.ledger.costmodel import CENT
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.savings.efficiency_policy import EfficiencyPolicy
from tests.dashboards.apptest import run_page
from tests.dashboards.browser import chromium_page, served_dashboard
from tests.support import activity_scenario, scenario
from tests.support.two_clusters import seed_two_clusters

POLICY = EfficiencyPolicy()
"""The default bands, as the dashboard's pages get them from the settings when no FINOPS_EFFICIENCY_* is set."""
ACTIVITY = ["sm_active_ratio", "tensor_active_ratio", "dram_active_ratio", "profiled_share"]


def _build(url: str) -> datetime:
    """The activity slice in the migrated database at ``url``; returns its first hour T."""
    t0 = scenario.start_hour()
    with session_factory(make_engine(url)).begin() as session:
        activity_scenario.build(session, t0, Pricing(load_catalog(), PricingModel.ON_DEMAND))
    return t0


@pytest.fixture
def profiled(database: str) -> str:
    _build(database)
    return database


def _report(url: str, now: datetime, by: str) -> list[Any]:
    start, end = period_bounds("7d", now)
    with session_factory(make_engine(url))() as session:
        return cost_report(session, start, end, by)  # type: ignore[arg-type]


def _usd(amount: Decimal) -> str:
    return f"{amount.quantize(CENT):,} USD"


def _exact(app: AppTest) -> dict[str, str]:
    return {m.label: m.proto.help.removeprefix("Exact: ") for m in app.metric if m.proto.help}


def _table(app: AppTest, column: str) -> tuple[pd.DataFrame, Any]:
    """The one table with ``column``, and its element."""
    (element,) = [f for f in app.dataframe if column in f.value.columns]
    return element.value, element


def _shown(value: object) -> object:
    """A cell as the report's field: NaN (an empty cell) is None, a Decimal its string."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return str(value) if isinstance(value, Decimal) else value


def _expected_activity(rows: list[Any], by: str) -> list[dict[str, object]]:
    held = [row for row in rows if row.key != UNALLOCATED_TEAM]
    return [
        {
            by: d[by],
            **{field: d[field] for field in ACTIVITY},
            "sm_active_cost": d["sm_active_cost"],
            "sm_active_band": POLICY.band(row.activity_ratio("sm_active_ratio")),
        }
        for row, d in zip(held, report_dicts(held, by), strict=True)  # type: ignore[arg-type]
    ]


def _activity_rows(frame: pd.DataFrame, by: str) -> list[dict[str, object]]:
    columns = [by, *ACTIVITY, "sm_active_cost", "sm_active_band"]
    return [{name: _shown(record[name]) for name in columns} for record in frame.to_dict("records")]


def test_the_bands_are_the_sites_efficiency_policy() -> None:
    assert (POLICY.effective_ratio, POLICY.ineffective_ratio) == (0.8, 0.5), "NVIDIA's guidance by default"
    strict = EfficiencyPolicy(effective_ratio=0.9, ineffective_ratio=0.4)
    assert "90 % or more" in activity.table_caption(strict) and "below 40 %" in activity.table_caption(strict)
    assert [strict.band(r) for r in (0.9, 0.85, 0.4, 0.39)] == ["effective", "moderate", "moderate", "ineffective"]
    assert strict.band(None) == NOT_MEASURED


def test_the_cube_carries_the_reports_activity(database_url: str) -> None:
    upgrade(make_engine(database_url))
    t0 = _build(database_url)
    start, end = t0 - timedelta(days=1), t0 + timedelta(hours=3)
    with session_factory(make_engine(database_url))() as session:
        cube = ledger_cube(session, start, end)
        for by in ("team", "job", "user"):
            expected = cost_report(session, start, end, by)
            got = cube.report(by)
            assert [r.key for r in got] == [r.key for r in expected]
            for mine, theirs in zip(got, expected, strict=True):
                for field in ACTIVITY:
                    ours = getattr(mine, field) if field == "profiled_share" else mine.activity_ratio(field)
                    report = getattr(theirs, field) if field == "profiled_share" else theirs.activity_ratio(field)
                    assert ours == pytest.approx(report) if report is not None else ours is None, (by, mine.key)
                assert mine.sm_active_cost == theirs.sm_active_cost, (by, mine.key)
                assert mine.held_gpu_seconds == theirs.held_gpu_seconds
                assert mine.profiled_gpu_seconds == theirs.profiled_gpu_seconds
    by_job = {row.key: row for row in cube.report("job")}
    assert by_job["602"].activity_ratio("sm_active_ratio") is None and by_job["602"].sm_active_cost is None
    assert by_job["603"].activity_ratio("sm_active_ratio") == 0.625 and by_job["603"].profiled_share == 0.5


def test_overview_shows_kernel_busy_and_sm_active_cost_of_the_report(profiled: str, now: datetime) -> None:
    app = run_page("views/overview.py", period="7d")
    rows = _report(profiled, now, "team")
    sm_active = sum((r.sm_active_cost for r in rows if r.sm_active_cost is not None), Decimal(0))
    exact = _exact(app)
    assert exact[activity.KERNEL_BUSY_COST] == _usd(fleet_summary(rows).used_cost)
    assert exact[activity.SM_ACTIVE_COST] == _usd(sm_active)
    rate = load_catalog().rate(activity_scenario.MODEL, PricingModel.ON_DEMAND, now)
    assert sm_active == sum((c for c in activity_scenario.sm_active_costs(rate).values() if c), Decimal(0))
    captions = [c.value for c in app.caption]
    (kernel_busy,) = [c for c in captions if c.startswith(f"**{activity.KERNEL_BUSY_COST}**")]
    assert "share of time a kernel ran" in kernel_busy and "coarse measure" in kernel_busy
    (sm_caption,) = [c for c in captions if c.startswith(f"**{activity.SM_ACTIVE_COST}**")]
    assert "share of the GPU's SMs that had work" in sm_caption and "80 % or more" in sm_caption
    # vision held 10,800 GPU-seconds, 9,000 profiled; nlp 7,200, none: 9,000 of 18,000.
    assert "Measured on 50 % of held GPU-hours" in sm_caption
    assert "SM activity there 52.5 % (moderate)" in sm_caption


def test_overview_says_sm_activity_was_not_measured_and_how_to_measure_it(database: str) -> None:
    seed_two_clusters(database)  # readings without any profiling field
    app = run_page("views/overview.py", period="7d")
    metrics = {m.label: m.value for m in app.metric}
    assert metrics[activity.SM_ACTIVE_COST] == NOT_MEASURED
    assert activity.KERNEL_BUSY_COST in _exact(app)
    (sm_caption,) = [c.value for c in app.caption if c.value.startswith(f"**{activity.SM_ACTIVE_COST}**")]
    assert "**Not measured**" in sm_caption and "docs/collector.md#hardware-activity" in sm_caption


def test_teams_page_shows_each_teams_activity_as_the_report(profiled: str, now: datetime) -> None:
    app = run_page("views/teams.py", period="7d")
    frame, element = _table(app, "sm_active_band")
    rows = _report(profiled, now, "team")
    assert _activity_rows(frame, "team") == _expected_activity(rows, "team")
    nlp = frame[frame["team"] == "nlp"].iloc[0]
    assert nlp["sm_active_band"] == NOT_MEASURED and nlp["profiled_share"] == 0.0
    assert pd.isna(nlp["sm_active_ratio"]) and pd.isna(nlp["tensor_active_ratio"]), "empty, not 0"
    assert element.proto.placeholder == NOT_MEASURED, "an empty cell reads 'not measured'"
    assert frame[frame["team"] == "vision"]["sm_active_band"].tolist() == ["moderate"]  # 0.525
    assert UNALLOCATED_TEAM not in frame["team"].tolist()


def test_jobs_page_shows_each_jobs_activity_as_the_report(profiled: str, now: datetime) -> None:
    app = run_page("views/jobs.py", period="7d")
    frame, element = _table(app, "sm_active_band")
    rows = _report(profiled, now, "job")
    assert _activity_rows(frame, "job") == _expected_activity(rows, "job")
    by_job = frame.set_index("job")
    assert by_job.loc["602", "sm_active_band"] == NOT_MEASURED and pd.isna(by_job.loc["602", "sm_active_cost"])
    assert (by_job.loc["601", "sm_active_ratio"], by_job.loc["601", "sm_active_band"]) == (0.5, "moderate")
    assert pd.isna(by_job.loc["603", "dram_active_ratio"]), "603's readings carried no DRAM activity"
    assert element.proto.placeholder == NOT_MEASURED


def test_jobs_chart_plots_utilisation_against_sm_activity_of_the_measured_jobs(profiled: str, now: datetime) -> None:
    app = run_page("views/jobs.py", period="7d")
    (chart,) = [c.proto for c in app.get("vega_lite_chart") if "jobs-" in c.proto.spec]
    spec = json.loads(chart.spec)
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["rect", "text", "line", "circle"]
    (points,) = [d for d in chart.datasets if d.name.startswith("jobs-")]
    drawn = convert_arrow_bytes_to_pandas_df(points.data.data).to_dict("records")
    rows = {r.key: r for r in _report(profiled, now, "job")}
    assert drawn == [
        {
            "job": key,
            "team": rows[key].team,
            "user": rows[key].user,
            "utilisation (%)": round(activity.utilization(rows[key]) * 100, 2),  # type: ignore[operator]
            "SM activity (%)": round(rows[key].activity_ratio("sm_active_ratio") * 100, 2),
            "cost": float(rows[key].allocated_cost),
        }
        for key in ("601", "603")  # the report's order; 602 was not measured
    ]
    assert [(d["utilisation (%)"], d["SM activity (%)"]) for d in drawn] == [(90.0, 50.0), (50.0, 62.5)]
    (bands,) = [d for d in chart.datasets if d.name.startswith("bands-")]
    edges = convert_arrow_bytes_to_pandas_df(bands.data.data)[["from", "to"]].values.tolist()
    assert edges == [[80.0, 100.0], [50.0, 80.0], [0.0, 50.0]]
    (caption,) = [c.value for c in app.caption if c.value.startswith("One point per job")]
    assert f"Left out: 1 job without SM activity ({NOT_MEASURED}), allocated cost " in caption
    assert caption.endswith(f"{_usd(rows['602'].allocated_cost)}.")


def test_jobs_chart_without_any_measured_job_says_so(database: str) -> None:
    seed_two_clusters(database)
    app = run_page("views/jobs.py", period="7d")
    assert not [c for c in app.get("vega_lite_chart") if "jobs-" in c.proto.spec]
    assert any(i.value.startswith("No job's SM activity was measured in this view (3 jobs") for i in app.info)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'activity.sqlite'}"
    upgrade(make_engine(url))
    _build(url)
    with served_dashboard(url) as base:
        yield base


def test_overview_renders_both_measures_in_a_real_browser(served: str) -> None:
    with chromium_page() as page:
        page.goto(f"{served}/?period=7d")
        page.get_by_text("Used (useful work), two measures").wait_for(timeout=60_000)
        page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=60_000)
        metrics = page.locator('[data-testid="stMetric"]')
        expect(metrics.filter(has_text=activity.KERNEL_BUSY_COST)).to_have_count(1)
        expect(metrics.filter(has_text=activity.SM_ACTIVE_COST)).to_contain_text("USD")
        expect(page.get_by_text("Measured on 50 % of held GPU-hours", exact=False)).to_be_visible()
        assert page.locator('[data-testid="stException"]').count() == 0
