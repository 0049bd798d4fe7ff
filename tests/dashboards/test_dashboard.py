"""Every dashboard page renders with Streamlit's AppTest, on seeded data and on an empty database; the numbers it shows
are those of ``finops.analysis.report.cost_report`` and ``finops.analysis.budgets.budget_status`` for the same period
and filters, which come from the URL's query string and stay in it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import streamlit as st
from prometheus_client import start_http_server
from sqlalchemy import update
from streamlit.testing.v1 import AppTest

from alerts.store import list_silences, select_alerts
from dashboards import charts
from dashboards.filters import period_bounds
from dashboards.format import compact
from finops.analysis.budgets import budget_status
from finops.analysis.dashboard_queries import top_idle
from finops.analysis.report import cost_report, fleet_summary
from finops.db.engine import make_engine, session_factory
from finops.db.models import Budget
from finops.ledger.costmodel import CENT
from finops.pricing.catalog import load_catalog
from finops.timeutil import month_start, utc_now
from tests.dashboards.apptest import run_page, stop_clock
from tests.support import scenario
from tests.support.environment import debian_binary
from tests.support.node_fixture import fixture_node_registry
from tests.support.prometheus_server import prometheus, wait_for
from tests.support.servers import free_port
from tests.support.two_clusters import NODE_B, seed_two_clusters

PAGES = (
    "views/overview.py",
    "views/teams.py",
    "views/jobs.py",
    "views/gpus.py",
    "views/idle.py",
    "views/savings.py",
    "views/alerts.py",
    "views/quality.py",
    "views/prices.py",
    "views/planning.py",
)
UNITS = ("(USD)", "(%)", "(W)", "(kW)", "(°C)", "(GB/s)", "(UTC)", "(GPUs)")


@pytest.fixture
def seeded(database: str) -> str:
    seed_two_clusters(database)
    return database


def _metrics(app: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in app.metric}


def _exact(app: AppTest) -> dict[str, str]:
    """The exact value of each headline figure, from its tooltip (``Exact: 1,234.57 USD``)."""
    return {m.label: m.proto.help.removeprefix("Exact: ").split(";")[0] for m in app.metric if m.proto.help}


def _frames(app: AppTest) -> list[pd.DataFrame]:
    return [frame.value for frame in app.dataframe]


def _frame_with(app: AppTest, *columns: str, without: tuple[str, ...] = ()) -> pd.DataFrame:
    """The one table with all of ``columns`` and none of ``without``."""
    (frame,) = [f for f in _frames(app) if set(columns) <= set(f.columns) and not set(without) & set(f.columns)]
    return frame


def _chart_specs(app: AppTest) -> list[dict[str, Any]]:
    return [json.loads(chart.proto.spec) for chart in app.get("vega_lite_chart")]


def _axis_titles(spec: dict[str, Any]) -> list[str]:
    """Titles of the quantitative and time x and y axes of a chart and its layers (None for an untitled one)."""
    titles = []
    for part in [spec, *spec.get("layer", []), *([spec["spec"]] if "spec" in spec else [])]:
        for channel in ("x", "y"):
            encoding = part.get("encoding", {}).get(channel, {})
            if encoding.get("type") in ("quantitative", "temporal"):
                titles.append(encoding.get("title"))
    return titles


def _report(url: str, start: datetime, end: datetime, by: str = "team", **filters: str) -> list[Any]:
    with session_factory(make_engine(url))() as session:
        return cost_report(session, start, end, by, **filters)  # type: ignore[arg-type]


def _usd(amount: Decimal) -> str:
    return f"{amount.quantize(CENT):,} USD"


@pytest.mark.parametrize("page", PAGES)
def test_pages_render_on_an_empty_database(database: str, page: str) -> None:
    app = run_page(page)
    assert len(app.get("download_button")) == len(app.dataframe), "every table has its CSV download"


@pytest.mark.parametrize("page", PAGES)
def test_every_table_downloads_as_csv_and_every_axis_names_its_unit(seeded: str, page: str) -> None:
    app = run_page(page, period="7d")
    assert len(app.get("download_button")) == len(app.dataframe) > 0
    assert all(button.proto.label == "Download CSV" for button in app.get("download_button"))
    for spec in _chart_specs(app):
        titles = _axis_titles(spec)
        assert titles and all(title and any(unit in title for unit in UNITS) for title in titles), titles


@pytest.mark.parametrize("page", PAGES)
def test_every_table_column_has_a_human_header_and_numbers_have_thousands_separators(seeded: str, page: str) -> None:
    app = run_page(page, period="7d", team="alpha", job="501")
    for frame in app.dataframe:
        config = {k: v for k, v in json.loads(frame.proto.columns).items() if k != "_index"}  # the index, hidden
        assert set(config) == {str(c) for c in frame.value.columns}, "every column is described"
        for name, column in config.items():
            label = column["label"]
            assert "_" not in label and label[0] == label[0].upper(), f"{name}: {label!r}"
            if column["type_config"]["type"] == "number" and column["type_config"]["format"] != "percent":
                assert "," in column["type_config"]["format"] and column["alignment"] == "right", name
            elif column["type_config"]["type"] == "number":  # a ratio 0-1 as its percent: never 1,000 %
                assert column["alignment"] == "right" and name.endswith(("_ratio", "_share")), name
            if "(USD)" in label and column["type_config"]["type"] == "number":
                assert column["type_config"]["format"].endswith(".2f") or "GPU-hour" in label, "money in cents"
    for metric in app.metric:
        if metric.proto.help:
            assert metric.proto.help.startswith("Exact: "), "compact figures carry their exact value"


def test_teams_chart_colours_used_unused_and_unallocated_cost(seeded: str) -> None:
    app = run_page("views/teams.py", period="7d")
    (costs,) = [spec for spec in _chart_specs(app) if spec["encoding"]["color"].get("title") == "Cost"]
    scale = costs["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"], strict=True)) == charts.COST_COLOURS
    (days,) = [spec for spec in _chart_specs(app) if spec["encoding"]["color"].get("title") == "Team"]
    scale = days["encoding"]["color"]["scale"]
    assert (
        dict(zip(scale["domain"], scale["range"], strict=True))["__unallocated__"]
        == charts.COST_COLOURS[charts.UNALLOCATED]
    )


@pytest.mark.parametrize(
    "params",
    [{}, {"period": "7d"}, {"period": "30d", "team": "alpha"}, {"cluster": "vega"}, {"partition": "gpu"}],
    ids=["default", "7d", "30d-alpha", "cluster-vega", "partition-gpu"],
)
def test_overview_shows_the_report_for_the_period_and_filters(
    database: str, monkeypatch: pytest.MonkeyPatch, params: dict[str, str]
) -> None:
    now = stop_clock(monkeypatch, scenario.slice_end(seed_two_clusters(database)))  # month to date: the slice
    app = run_page("views/overview.py", **params)
    start, end = period_bounds(params.get("period", "mtd"), now)
    filters = {k: v for k, v in params.items() if k != "period"}
    rows = _report(database, start, end, **filters)
    summary = fleet_summary(rows)
    metrics, exact = _metrics(app), _exact(app)
    assert exact["GPU capacity cost"] == _usd(summary.capacity_cost)
    assert metrics["GPU capacity cost"] == f"{compact(summary.capacity_cost)} USD"
    assert exact["Kernel-busy cost"] == _usd(summary.used_cost)
    assert _metrics(app)["SM-active cost"] == "not measured", "the scenario's readings carry no profiling field"
    assert exact["Unused allocated cost"] == _usd(summary.idle_cost)
    assert metrics["Utilisation of allocated GPUs"] == f"{summary.utilization:.1%}"
    assert any(c.value.startswith("**Unused allocated cost**") for c in app.caption), "the measure is explained"
    at = now.replace(second=0, microsecond=0)
    month_rows = _report(database, month_start(at), at, **filters)
    assert exact["Spent this month"] == _usd(sum((r.allocated_cost for r in month_rows), Decimal(0)))
    with session_factory(make_engine(database))() as session:
        statuses = budget_status(session, at, team=filters.get("team"))
    budgets = _frame_with(app, "over_budget")
    assert budgets["team"].tolist() == [s.team for s in statuses] == ["alpha"]
    assert [Decimal(str(v)) for v in budgets["spent"]] == [s.spent.quantize(CENT) for s in statuses]
    wasters = _frame_with(app, "job", "idle_gpu_hours")
    expected = top_idle(_report(database, start, end, "job", **filters))
    assert wasters["job"].tolist() == [r.key for r in expected]
    assert [Decimal(str(v)) for v in wasters["idle_cost"]] == [r.idle_cost.quantize(CENT) for r in expected]
    days = _frame_with(app, "day")
    for team_row in rows:
        spent = sum(Decimal(str(v)) for v in days[days["team"] == team_row.key]["allocated_cost"])
        assert abs(spent - team_row.allocated_cost) <= CENT * len(days), "days add up to the period (to the cent)"


def test_filters_come_from_the_url_stay_in_it_and_follow_to_other_pages(seeded: str) -> None:
    app = run_page("views/overview.py", period="7d", team="alpha")
    assert app.selectbox(key="url_team").value == "alpha"
    assert app.selectbox(key="url_period").value == "7d"
    assert app.query_params == {"period": "7d", "team": "alpha"}
    app.switch_page("views/teams.py").run()
    assert not app.exception
    assert app.selectbox(key="url_team").value == "alpha", "the filter follows to the next page"
    assert app.query_params["team"] == "alpha", "and is written back into its URL"
    assert set(_frame_with(app, "energy_kwh")["team"]) == {"alpha"}
    app.selectbox(key="url_team").select("All").run()
    assert "team" not in app.query_params, "the default leaves the URL"
    assert set(_frame_with(app, "energy_kwh")["team"]) == {"alpha", "gamma", "__unmapped__", "__unallocated__"}
    app.selectbox(key="url_cluster").select("vega").run()
    assert app.query_params["cluster"] == "vega"
    assert set(_frame_with(app, "energy_kwh")["team"]) == {"gamma", "__unallocated__"}


def test_a_bad_url_value_is_ignored_with_a_warning(seeded: str) -> None:
    app = run_page("views/overview.py", period="fortnight", team="nobody")
    assert any("fortnight" in w.value for w in app.sidebar.warning)
    assert app.selectbox(key="url_period").value == "mtd"
    assert app.selectbox(key="url_team").value == "nobody", "a team without rows still applies (and shows nothing)"
    assert any(i.value.startswith("No cost data in this period") for i in app.info)


def test_custom_period_from_the_url(seeded: str) -> None:
    t0 = scenario.start_hour()
    first, last = t0.date(), (t0 + timedelta(hours=2)).date()
    app = run_page("views/teams.py", period="custom", **{"from": first.isoformat(), "to": last.isoformat()})
    start, end = period_bounds("custom", utc_now(), first, last)
    rows = _report(seeded, start, end)
    frame = _frame_with(app, "energy_kwh")
    assert frame["team"].tolist() == [r.key for r in rows]


def test_teams_page_burn_down_and_breakdown_of_a_team(seeded: str, now: datetime) -> None:
    app = run_page("views/teams.py", team="alpha", period="7d")
    at = now.replace(second=0, microsecond=0)
    with session_factory(make_engine(seeded))() as session:
        (status,) = budget_status(session, at, team="alpha")
    metrics, exact = _metrics(app), _exact(app)
    assert exact[f"Spent in {at:%B %Y}"] == _usd(status.spent)
    assert (metrics["Budget"], exact["Budget"]) == ("1.00k USD", "1,000.00 USD")
    assert exact["Forecast month-end"] == _usd(status.forecast)
    burn = _frame_with(app, "cumulative_spend")
    assert Decimal(str(burn["cumulative_spend"].iloc[-1])) == status.spent.quantize(CENT)
    titles = [title for spec in _chart_specs(app) for title in _axis_titles(spec)]
    assert "Cumulative spend (USD)" in titles
    start, end = period_bounds("7d", now)
    jobs = _frame_with(app, "job", "allocated_gpu_hours")
    expected = [r for r in _report(seeded, start, end, "job", team="alpha") if r.key != "__unallocated__"]
    assert jobs["job"].tolist() == [r.key for r in expected] == ["501"]
    assert [Decimal(str(v)) for v in jobs["allocated_cost"]] == [r.allocated_cost.quantize(CENT) for r in expected]
    users = _frame_with(app, "user", without=("job",))
    assert users["user"].tolist() == ["alice"]


def test_teams_page_without_a_team_asks_for_one(seeded: str) -> None:
    app = run_page("views/teams.py", period="7d")
    assert any("Choose a team" in i.value for i in app.info)
    rows = _report(seeded, *period_bounds("7d", utc_now()))
    assert _frame_with(app, "energy_kwh")["team"].tolist() == [r.key for r in rows]


def test_jobs_page_lists_the_report_and_a_jobs_gpus_over_time(seeded: str) -> None:
    app = run_page("views/jobs.py", period="7d", job="501")
    rows = [r for r in _report(seeded, *period_bounds("7d", utc_now()), "job") if r.key != "__unallocated__"]
    frame = _frame_with(app, "allocated_gpu_hours")
    assert sorted(frame["job"]) == sorted(r.key for r in rows)
    assert [Decimal(str(c)) for c in frame["allocated_cost"]] == sorted(
        (r.allocated_cost.quantize(CENT) for r in rows), reverse=True
    ), "most expensive first, to the cent"
    assert app.selectbox(key="url_job").value == "501"
    points = _frame_with(app, "power (W)")
    assert set(points["GPU"]) == {f"{scenario.NODE}/gpu0"}
    assert points["utilisation (%)"].tolist() == [100.0] * 60 + [0.0] * 30, "inside the allocation [T, T+90 min)"
    assert set(points["power (W)"]) == {600.0}
    titles = [title for spec in _chart_specs(app) for title in _axis_titles(spec)]
    assert {"GPU utilisation (%)", "Board power (W)", "Time (UTC)"} <= set(titles)


def test_gpus_page_heatmap_power_temperature_and_throttle_reasons(seeded: str) -> None:
    app = run_page("views/gpus.py")
    cells = _frame_with(app, "utilisation (%)")
    a = cells[cells["node"] == scenario.NODE]
    assert a["utilisation (%)"].tolist() == [75.0, 25.0]  # mean of 100 % and 50 %, then of 0 % and 50 %
    assert a["power (W)"].tolist() == [1200.0, 1200.0]
    b = cells[cells["node"] == NODE_B]
    assert b["hottest GPU (°C)"].tolist() == [70.0, 70.0]
    reasons = _frame_with(app, "sw_power_cap (%)").set_index("node")
    assert reasons.loc[NODE_B, "sw_power_cap (%)"] == reasons.loc[NODE_B, "hw_thermal (%)"] == 100.0
    assert reasons.loc[NODE_B, "gpu_idle (%)"] == 0.0
    assert reasons.loc[scenario.NODE, "hw_thermal (%)"] == 0.0
    assert any("FINOPS_PROMETHEUS_URL" in i.value for i in app.info), "says what to configure for the fabric"
    vega = run_page("views/gpus.py", cluster="vega")
    assert set(_frame_with(vega, "utilisation (%)")["node"]) == {NODE_B}
    assert "url_team" not in [s.key for s in vega.selectbox], "no team filter on a page about hardware"


def test_gpus_page_reads_fabric_and_storage_from_prometheus(
    seeded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector_port = free_port()
    server, thread = start_http_server(collector_port, addr="127.0.0.1", registry=fixture_node_registry(tmp_path))
    try:
        jobs = {"gpu-finops-collector": [f"127.0.0.1:{collector_port}"]}
        with prometheus(debian_binary("prometheus"), tmp_path, jobs) as url:
            wait_for(url, "rate(gpufinops_infiniband_received_bytes_total[1m])")
            monkeypatch.setenv("FINOPS_PROMETHEUS_URL", url)
            app = run_page("views/gpus.py")
            summary = _frame_with(app, "peak (GB/s)")
            assert set(summary["node"]) == {"127.0.0.1"}
            assert {"InfiniBand", "local disks", "NFS", "Lustre"} <= set(summary["kind"])
            assert set(summary["direction"]) == {"received", "transmitted", "read", "written"}
            monkeypatch.setenv("FINOPS_PROMETHEUS_URL", f"http://127.0.0.1:{free_port()}")
            down = run_page("views/gpus.py", period="7d")
            assert any("did not answer" in w.value for w in down.warning)
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_idle_and_quality_pages_apply_the_filters(seeded: str) -> None:
    idle = run_page("views/idle.py", period="7d")
    assert idle.dataframe[0].value["job"].tolist() == ["501"]
    assert idle.dataframe[0].value["reason"].tolist() == ["unexplained"], "the scenario's idle GPU held no memory"
    assert idle.dataframe[0].value["evidence"].iloc[0].startswith("nothing stood out: no storage rates")
    assert run_page("views/idle.py", period="7d", cluster="vega").success[0].value == "No idle episodes in this period."
    quality = run_page("views/quality.py", period="7d")
    assert _metrics(quality)["GPU-hours held by a job"] == "66.7%"  # 4 of the 6 GPU-hours
    assert quality.dataframe[0].value["node"].tolist() == sorted([scenario.NODE, NODE_B])
    vega = run_page("views/quality.py", period="7d", cluster="vega")
    assert _metrics(vega)["GPU-hours held by a job"] == "50.0%"
    assert vega.dataframe[0].value["node"].tolist() == [NODE_B]


def test_alerts_page_shows_the_stores_firing_and_resolved_alerts_and_silences(seeded: str, now: datetime) -> None:
    app = run_page("views/alerts.py", period="7d")
    at = now.replace(second=0, microsecond=0)
    start, end = period_bounds("7d", now)
    with session_factory(make_engine(seeded))() as session:
        firing = select_alerts(session, at, "firing")
        resolved = select_alerts(session, at, "resolved", start=start, end=end)
        current = list_silences(session, at)
        every = list_silences(session, at, include_expired=True)
    metrics = _metrics(app)
    assert metrics["Firing alerts"] == str(len(firing)) == "2"
    assert metrics["Muted by a silence or an inhibition"] == str(sum(a.muted for a in firing)) == "1"
    assert metrics["Resolved alerts"] == str(len(resolved)) == "1"
    shown = _frame_with(app, "since (UTC)")
    assert shown["rule"].tolist() == [a.rule for a in firing] == ["collector-silent", "throttling"]
    assert shown["muted"].tolist() == [a.muted for a in firing] == [True, False], "the silence on the node mutes it"
    assert shown["severity"].tolist() == ["critical", "warning"]
    assert shown["labels"].tolist()[1] == f'gpu="0", job="601", node="{NODE_B}", team="gamma"'
    assert shown["summary"].tolist() == [a.summary for a in firing]
    history = _frame_with(app, "end")
    assert history["rule"].tolist() == [a.rule for a in resolved] == ["idle-gpu"]
    assert history["hours"].tolist() == [0.5]
    silences = _frame_with(app, "matchers")
    assert silences["id"].tolist() == [s.id for s in current]
    assert silences["comment"].tolist() == ["rack move"] and silences["state"].tolist() == ["active"]
    app.selectbox(key="url_silences").select("all").run()
    assert not app.exception
    assert app.query_params["silences"] == "all", "the choice is kept in the URL"
    silences = _frame_with(app, "matchers")
    assert silences["id"].tolist() == [s.id for s in every]
    assert silences["state"].tolist() == ["expired", "active"], "ending soonest first"


def test_alerts_page_team_filter_keeps_the_alerts_labelled_with_the_team(seeded: str, now: datetime) -> None:
    at = now.replace(second=0, microsecond=0)
    start, end = period_bounds("7d", now)
    gamma = run_page("views/alerts.py", period="7d", team="gamma")
    with session_factory(make_engine(seeded))() as session:
        firing = select_alerts(session, at, "firing", team="gamma")
        resolved = select_alerts(session, at, "resolved", start=start, end=end, team="alpha")
    assert _metrics(gamma)["Firing alerts"] == str(len(firing)) == "1"
    assert _frame_with(gamma, "since (UTC)")["rule"].tolist() == ["throttling"], "node alerts carry no team"
    assert any(i.value.startswith("No alert that held in this period") for i in gamma.info)
    assert _frame_with(gamma, "matchers")["comment"].tolist() == ["rack move"], "silences whatever the team"
    assert {"url_cluster", "url_partition"}.isdisjoint(s.key for s in gamma.selectbox), "alerts carry neither"
    alpha = run_page("views/alerts.py", period="7d", team="alpha")
    assert [s.value for s in alpha.success] == ["No alert is firing."]
    assert _metrics(alpha)["Resolved alerts"] == str(len(resolved)) == "1"
    assert _frame_with(alpha, "end")["labels"].tolist() == ['job="501", team="alpha", user="alice"']


def test_alerts_page_history_follows_the_period(seeded: str) -> None:
    day = (scenario.start_hour() - timedelta(days=2)).date().isoformat()
    app = run_page("views/alerts.py", period="custom", **{"from": day, "to": day})
    assert "Resolved alerts" not in _metrics(app), "the idle alert held after that day"
    assert any(i.value.startswith("No alert that held in this period") for i in app.info)
    assert _metrics(app)["Firing alerts"] == "2", "what fires now does not depend on the period"


def test_alerts_page_on_an_empty_database_says_there_is_nothing(database: str) -> None:
    app = run_page("views/alerts.py")
    assert [s.value for s in app.success] == ["No alert is firing."]
    assert len(app.info) == 2 and not app.metric and not app.dataframe


def _price_input(app: AppTest) -> float:
    (price,) = [w for w in app.number_input if w.label.startswith("Price per GPU-hour")]
    return float(price.value)


def test_planning_offers_the_measured_price_per_gpu_hour(database: str) -> None:
    assert _price_input(run_page("views/planning.py")) == 2.50, "no ledger yet: the stated default"
    scenario.seed_dashboard_database(database)
    st.cache_data.clear()  # query results are cached for a minute; this test does not wait
    st.cache_resource.clear()
    app = run_page("views/planning.py")
    now = utc_now().replace(minute=0, second=0, microsecond=0)
    rows = _report(database, now - timedelta(days=30), now)
    charged = sum((row.allocated_cost for row in rows), Decimal(0))
    gpu_hours = Decimal(sum(row.allocated_gpu_seconds for row in rows)) / 3600
    assert _price_input(app) == float((charged / gpu_hours).quantize(CENT))
    assert _metrics(app)["Inference: weights + KV cache"] == "31.2 GB"  # 7B bf16 = 14 GB + 8 x 2 GiB KV cache


def test_prices_page_lists_every_catalog_row_with_on_prem_parts(database: str) -> None:
    frame = run_page("views/prices.py").dataframe[0].value
    catalog = load_catalog()
    assert len(frame) == sum(len(model.prices) for model in catalog.models.values())
    h100 = frame[(frame["model"] == "H100-SXM-80GB") & (frame["pricing model"] == "on-prem")]
    current = h100[h100["from"] <= utc_now().date()].sort_values("from").iloc[-1]
    parts = catalog.onprem_parts("NVIDIA H100 80GB HBM3", utc_now())
    assert current["per_gpu_hour"] == parts.total
    assert current["capex"] == parts.capex_per_hour
    assert current["energy"] == parts.energy_per_hour


def test_a_budget_in_another_currency_is_left_out_and_said(seeded: str, now: datetime) -> None:
    """A budget stored in EUR before budgets had to be in the catalogue's currency: the pages say it is not
    comparable with the USD spend and leave it out of the totals and the burn-down, without failing."""
    with session_factory(make_engine(seeded)).begin() as session:
        session.execute(update(Budget).values(currency="EUR"))
    overview = run_page("views/overview.py", period="7d")
    (warning,) = [w.value for w in overview.warning if "budget" in w.value]
    assert "budget in EUR but spend in USD: not comparable" in warning
    assert _metrics(overview)["Budgets this month"] == "none set"
    teams = run_page("views/teams.py", team="alpha", period="7d")
    assert any("This team's budget is left out: budget in EUR" in w.value for w in teams.warning)
    assert _metrics(teams)["Budget"] == "none set"


def test_without_a_login_every_page_says_it_is_unauthenticated(seeded: str) -> None:
    for page in PAGES:
        notices = [w.value for w in run_page(page).sidebar.warning]
        assert any(
            n.startswith("Unauthenticated: listening on 127.0.0.1 only; configure FINOPS_DASHBOARD_OIDC_")
            for n in notices
        ), page


def test_with_a_login_required_a_visitor_sees_only_the_log_in_button(
    seeded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FINOPS_DASHBOARD_OIDC_METADATA_URL", "https://idp.example.org/.well-known/openid-configuration")
    app = run_page("views/overview.py")
    assert [b.label for b in app.button] == ["Log in"]
    assert not app.metric and not app.dataframe and not app.sidebar.warning
