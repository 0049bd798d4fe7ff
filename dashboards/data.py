"""Cached access to the database for the pages: the engine once per process, query results for a minute.

Every filter is part of the key of every cached function (a :class:`~finops.analysis.filters.Scope`: cluster, team and
partition, hashed field by field), so one viewer never sees another's filtered data. Pass instants rounded (whole
hours for periods, minutes for "now"), so that repeated views hit the cache. The ledger is read once per period
and filters (:func:`cube`); the reports and the spend by day are taken from that read, and what the pages draw
from them (tables, chart specs) is cached beside them, so that a rerun within the minute only renders.
"""

from __future__ import annotations

import functools
import gc
import os
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import pandas as pd
import streamlit as st
from sqlalchemy import Engine

from dashboards import activity, charts
from dashboards.format import cents
from dashboards.node_views import NodeViews, node_views
from finops.analysis.dashboard_queries import (
    CubeBy,
    DailyCost,
    FilterChoices,
    LedgerCube,
    MonthOverview,
    filter_choices,
    ledger_cube,
    month_overview,
    node_names,
)
from finops.analysis.filters import Scope
from finops.analysis.idle import EpisodeView, list_episodes
from finops.analysis.price_estimates import EstimatedPrice, estimated_prices
from finops.analysis.quality import NodeFreshness, UntimelyNode, node_freshness, untimely_by_node
from finops.analysis.report import MONEY_FIELDS, ReportRow, UnpricedModel, unpriced_by_model
from finops.analysis.report_format import report_dicts
from finops.analysis.telemetry import (
    JobTelemetry,
    NodeBucket,
    Throughput,
    fabric_throughput,
    job_telemetry,
    node_buckets,
)
from finops.db.engine import make_engine, require_migrated, session_factory
from finops.db.models import UNALLOCATED_TEAM
from finops.ingest.prometheus import PrometheusClient
from finops.pricing.catalog import PriceCatalog, load_catalog
from finops.pricing.store import catalog_in_force
from finops.savings.commitments import CommitmentReport, commitment_report
from finops.savings.efficiency import EfficiencyReport, efficiency_report
from finops.savings.rightsizing import rightsizing
from finops.savings.rightsizing_policy import RightsizingReport
from finops.savings.waste_costs import ReasonCost, idle_cost_by_reason
from finops.savings.waste_tables import reason_dicts
from finops.settings.combined import Settings

TTL_SECONDS = 60
TEAM_COLUMNS = [
    "team",
    "allocated_cost",
    "used_cost",
    "idle_cost",
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unmetered_gpu_hours",
    "unpriced_gpu_hours",
    "energy_kwh",
    "energy_cost",
]
"""The columns of the Teams page's table (fields of :func:`finops.analysis.report_format.report_dicts`; the money
columns' headers name the currency, and GPU-seconds are GPU-hours there)."""
NO_CHOICES = FilterChoices([], [], [])
EVERYTHING = Scope()
"""No filter: every cluster, team and partition."""


def _exclude_loaded_objects_from_collections() -> None:
    """Move every object alive now (the modules the pages use: Streamlit, pandas, Altair and its Vega-Lite
    schema, SQLAlchemy, …) out of reach of the garbage collector's full collections.

    Streamlit runs a full collection after every script run (``runner.postScriptGC``), on the script's thread
    and holding the interpreter lock while the last messages of the run wait to be sent, so every rerun paid
    for traversing these ~230,000 long-lived objects (100-200 ms on two shared cores) before the browser heard
    that the script had finished. Objects made later, such as cached query results, are still collected."""
    gc.collect()
    gc.freeze()


_exclude_loaded_objects_from_collections()


def settings() -> Settings:
    """The service settings (:class:`finops.settings.combined.Settings`), made once per state of the ``FINOPS_``
    variables of the environment (which is all they are read from, bar the files of secrets the pages do not
    use) rather than on every run."""
    return _settings(tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("FINOPS_"))))


@functools.lru_cache(maxsize=4)
def _settings(environment: tuple[tuple[str, str], ...]) -> Settings:
    return Settings()


def database_url() -> str:
    """The configured database (``FINOPS_DATABASE_URL``); part of every cache key below."""
    return settings().effective_database_url


def prometheus_url() -> str:
    """The configured Prometheus (``FINOPS_PROMETHEUS_URL``), '' when none."""
    return settings().prometheus_url


def _filters(scope: Scope) -> dict[str, str | None]:
    """The scope as the ``cluster``, ``team`` and ``partition`` keyword arguments of the query functions."""
    return {"cluster": scope.cluster, "team": scope.team, "partition": scope.partition}


@st.cache_resource
def engine(url: str) -> Engine:
    """The engine for ``url``, once per process, checked to be migrated."""
    created = make_engine(url)
    require_migrated(created)
    return created


@st.cache_data(ttl=TTL_SECONDS)
def catalog(url: str) -> PriceCatalog:
    """The price catalog in force (:func:`finops.pricing.store.catalog_in_force`): the newest imported one, else
    the configured file (``FINOPS_PRICE_CATALOG``, default the packaged one)."""
    with session_factory(engine(url))() as session:
        return catalog_in_force(session, load_catalog(settings().price_catalog))


@st.cache_data(ttl=TTL_SECONDS)
def choices(url: str) -> FilterChoices:
    """:func:`finops.analysis.dashboard_queries.filter_choices`."""
    with session_factory(engine(url))() as session:
        return filter_choices(session)


@st.cache_resource(ttl=TTL_SECONDS, max_entries=16)
def cube(url: str, start: datetime, end: datetime, scope: Scope = EVERYTHING) -> LedgerCube:
    """:func:`finops.analysis.dashboard_queries.ledger_cube` for the period and filters: the one read of the ledger that
    the reports and the spend by day below are taken from, shared by the pages for a minute.

    Kept as a resource (the object itself, not a pickled copy: a month of a large cluster is ~10,000 cells, whose
    copy would cost more than the pages' own work), so it is never changed: the functions below read it and
    return their own results, which are cached per argument like every query result."""
    with session_factory(engine(url))() as session:
        return ledger_cube(session, start, end, **_filters(scope))


@st.cache_data(ttl=TTL_SECONDS)
def report(url: str, start: datetime, end: datetime, by: CubeBy, scope: Scope = EVERYTHING) -> list[ReportRow]:
    """The rows of :func:`finops.analysis.report.cost_report` for the period and filters, by team, job or user."""
    return cube(url, start, end, scope).report(by)


@st.cache_data(ttl=TTL_SECONDS)
def unpriced(url: str, start: datetime, end: datetime, scope: Scope = EVERYTHING) -> list[UnpricedModel]:
    """:func:`finops.analysis.report.unpriced_by_model` for the period and filters: GPU-hours whose model has no
    price (counted, not costed), by model, with the fix."""
    with session_factory(engine(url))() as session:
        return unpriced_by_model(session, start, end, **_filters(scope))


@st.cache_data(ttl=TTL_SECONDS)
def price_estimates(url: str, start: datetime, end: datetime, scope: Scope = EVERYTHING) -> list[EstimatedPrice]:
    """:func:`finops.analysis.price_estimates.estimated_prices` for the period and filters: the prices behind its
    costs that rest on an estimate, with the catalog in force."""
    with session_factory(engine(url))() as session:
        return estimated_prices(session, catalog(url), start, end, **_filters(scope))


@st.cache_data(ttl=TTL_SECONDS)
def wasters(url: str, start: datetime, end: datetime, by: CubeBy, scope: Scope = EVERYTHING) -> list[ReportRow]:
    """:func:`finops.analysis.dashboard_queries.top_idle` of the report by team or job: the five biggest idle costs
    (only these five are kept: a month's report by job has thousands of rows)."""
    return cube(url, start, end, scope).top_idle(by)


@st.cache_data(ttl=TTL_SECONDS)
def daily(url: str, start: datetime, end: datetime, scope: Scope = EVERYTHING) -> list[DailyCost]:
    """Spend per UTC day and team for the period and filters (:meth:`LedgerCube.daily`)."""
    return cube(url, start, end, scope).daily()


@st.cache_data(ttl=TTL_SECONDS)
def spend_by_day(
    url: str, start: datetime, end: datetime, currency: str, scope: Scope = EVERYTHING
) -> tuple[dict[str, Any], pd.DataFrame]:
    """The spend by day for the period and filters, as the pages show it: the stacked bars' Vega-Lite spec
    (:func:`dashboards.charts.daily_spend_spec`, for ``st.vega_lite_chart``, its axis in ``currency``) and the table
    under them (:func:`dashboards.charts.daily_frame`)."""
    days = daily(url, start, end, scope)
    return charts.daily_spend_spec(days, currency, start, end), charts.daily_frame(days)


@st.cache_data(ttl=TTL_SECONDS)
def team_costs(
    url: str, start: datetime, end: datetime, scope: Scope = EVERYTHING
) -> tuple[dict[str, Any], pd.DataFrame]:
    """The cost report by team for the period and filters, as the Teams page shows it: the bars of used, idle and
    unallocated cost per team (:func:`dashboards.charts.team_cost_spec`) and the report's rows with the fields of
    ``gpu-finops report --by team --format json`` (:func:`finops.analysis.report_format.report_dicts`, money as exact
    decimals in cents) in the order of :data:`TEAM_COLUMNS`, money first."""
    rows = report(url, start, end, "team", scope)
    frame = pd.DataFrame(report_dicts(rows, "team"))
    if not rows:
        return {}, frame
    spec = charts.team_cost_spec(frame, rows[0].currency)
    for field in MONEY_FIELDS:
        frame[field] = frame[field].map(lambda amount: None if amount is None else Decimal(amount))
    return spec, frame[TEAM_COLUMNS]


@st.cache_data(ttl=TTL_SECONDS)
def team_activity(url: str, start: datetime, end: datetime, scope: Scope = EVERYTHING) -> pd.DataFrame:
    """The hardware activity of each team that held GPUs in the period and filters, as the Teams page shows it:
    ``team``, its ``utilization`` (:func:`dashboards.activity.utilization`, to compare) and the columns of
    :func:`dashboards.activity.activity_frame` of the report by team."""
    rows = [row for row in report(url, start, end, "team", scope) if row.key != UNALLOCATED_TEAM]
    frame = activity.activity_frame(rows, "team", settings().efficiency_policy)
    frame.insert(1, "utilization", [activity.utilization(row) for row in rows])
    return frame


JOB_COLUMNS = [
    "job",
    "team",
    "user",
    "allocated_gpu_hours",
    "allocated_cost",
    "idle_cost",
    "utilization",
    *activity.ACTIVITY_COLUMNS,
]
"""The columns of the Jobs page's table."""


@st.cache_data(ttl=TTL_SECONDS)
def job_table(url: str, start: datetime, end: datetime, scope: Scope = EVERYTHING) -> pd.DataFrame:
    """The cost report by job for the period and filters as the Jobs page shows it (capacity no job held left
    out), most expensive first: :data:`JOB_COLUMNS`, ``utilization`` by :func:`dashboards.activity.utilization`
    (None without readings), the hardware activity of :func:`dashboards.activity.activity_frame`, and
    ``allocated_cost`` and ``idle_cost`` in cents."""
    rows = [row for row in report(url, start, end, "job", scope) if row.key != UNALLOCATED_TEAM]
    frame = activity.activity_frame(rows, "job", settings().efficiency_policy)
    frame["team"] = [row.team for row in rows]
    frame["user"] = [row.user for row in rows]
    frame["allocated_gpu_hours"] = [round(row.allocated_gpu_seconds / 3600, 2) for row in rows]
    frame["utilization"] = [activity.utilization(row) for row in rows]
    frame["allocated_cost"] = [cents(row.allocated_cost) for row in rows]
    frame["idle_cost"] = [cents(row.idle_cost) for row in rows]
    return frame[JOB_COLUMNS]


@dataclass(frozen=True, slots=True)
class JobActivityChart:
    """The chart of utilisation against SM activity per job (:func:`dashboards.charts.activity_scatter_spec`; an
    empty dict when no job has both), the number of jobs it draws, and the number and allocated cost (exact) of
    those it leaves out for want of SM activity (or of readings)."""

    spec: dict[str, Any]
    drawn: int
    left_out: int
    left_out_cost: Decimal


@st.cache_data(ttl=TTL_SECONDS)
def job_activity_chart(
    url: str, start: datetime, end: datetime, currency: str, scope: Scope = EVERYTHING
) -> JobActivityChart:
    """Utilisation against SM activity of the jobs of the period and filters (capacity no job held left out), with
    the bands of the settings' efficiency policy, the cost axis in ``currency``."""
    policy = settings().efficiency_policy
    rows = [row for row in report(url, start, end, "job", scope) if row.key != UNALLOCATED_TEAM]
    drawn, left_out = [], []
    for row in rows:
        used, sm_active = activity.utilization(row), row.activity_ratio("sm_active_ratio")
        if used is None or sm_active is None:
            left_out.append(row)
            continue
        drawn.append(
            {
                "job": row.key,
                "team": row.team,
                "user": row.user,
                "utilisation (%)": round(used * 100, 2),
                "SM activity (%)": round(sm_active * 100, 2),
                "cost": float(row.allocated_cost),
            }
        )
    left_out_cost = sum((row.allocated_cost for row in left_out), Decimal(0))
    spec = (
        charts.activity_scatter_spec(pd.DataFrame(drawn), currency, policy.effective_ratio, policy.ineffective_ratio)
        if drawn
        else {}
    )
    return JobActivityChart(spec, len(drawn), len(left_out), left_out_cost)


@st.cache_data(ttl=TTL_SECONDS)
def breakdown(url: str, start: datetime, end: datetime, by: CubeBy, scope: Scope = EVERYTHING) -> pd.DataFrame:
    """The cost report by job or by user for the period and filters as a table (capacity no job held left out):
    ``job`` or ``user``, for a job its ``team`` and ``user``, ``allocated_gpu_hours``, and ``allocated_cost``,
    ``used_cost`` and ``idle_cost`` in cents; in the report's order (most expensive first)."""
    columns = [by, *(["team", "user"] if by == "job" else []), "allocated_gpu_hours"]
    columns += ["allocated_cost", "used_cost", "idle_cost"]
    return pd.DataFrame(
        [
            [
                r.key,
                *([r.team, r.user] if by == "job" else []),
                round(r.allocated_gpu_seconds / 3600, 2),
                cents(r.allocated_cost),
                cents(r.used_cost),
                cents(r.idle_cost),
            ]
            for r in report(url, start, end, by, scope)
            if r.key != UNALLOCATED_TEAM
        ],
        columns=columns,
    )


@st.cache_data(ttl=TTL_SECONDS)
def burn_down_spec(
    points: tuple[tuple[datetime, float, str], ...],
    first: datetime,
    following: datetime,
    budget: float | None,
    currency: str,
) -> dict[str, Any]:
    """:func:`dashboards.charts.burn_down_spec`, cached by its arguments (a few dozen points)."""
    return charts.burn_down_spec(points, first, following, budget, currency)


@st.cache_data(ttl=TTL_SECONDS)
def month(url: str, at: datetime, scope: Scope = EVERYTHING) -> MonthOverview:
    """:func:`finops.analysis.dashboard_queries.month_overview` at ``at`` (rounded to the minute) for the filters."""
    with session_factory(engine(url))() as session:
        return month_overview(session, at, **_filters(scope))


@st.cache_data(ttl=TTL_SECONDS)
def episodes(url: str, start: datetime, end: datetime, scope: Scope = EVERYTHING) -> list[EpisodeView]:
    """:func:`finops.analysis.idle.list_episodes` for the period and filters."""
    with session_factory(engine(url))() as session:
        return list_episodes(session, start, end, **_filters(scope))


@st.cache_data(ttl=TTL_SECONDS)
def idle_by_reason(url: str, start: datetime, end: datetime, team: str | None) -> list[ReasonCost]:
    """:func:`finops.savings.waste_costs.idle_cost_by_reason` for the period and ``team`` (None: every team), with
    the configured thresholds of the waste reasons (``FINOPS_WASTE_*``), as ``gpu-finops report --by reason``."""
    with session_factory(engine(url))() as session:
        return idle_cost_by_reason(session, start, end, team=team, policy=settings().reason_policy)


@st.cache_data(ttl=TTL_SECONDS)
def reason_costs(url: str, start: datetime, end: datetime, team: str | None) -> tuple[dict[str, Any], pd.DataFrame]:
    """The idle cost by reason (:func:`idle_by_reason`) as the Savings page shows it: the bars of cost per reason
    and team (:func:`dashboards.charts.reason_cost_spec`, an empty dict without rows) and one row per team, month
    and reason with the fields of :func:`finops.savings.waste_tables.reason_dicts`: ``team``, ``month``
    (``YYYY-MM``), ``reason`` (its title), ``reason_gpu_hours``, ``unpriced_gpu_hours`` and ``reason_cost`` (a
    Decimal in cents adding up to the rounded total; None when all the row's GPU-hours are unpriced)."""
    rows = idle_by_reason(url, start, end, team)
    columns = ["team", "month", "reason", "reason_gpu_hours", "unpriced_gpu_hours", "reason_cost"]
    frame = pd.DataFrame(
        [
            [
                d["team"],
                d["month"],
                d["title"],
                d["gpu_hours"],
                d["unpriced_gpu_hours"],
                None if d["cost"] is None else Decimal(str(d["cost"])),
            ]
            for d in reason_dicts(rows)
        ],
        columns=columns,
    )
    if not rows:
        return {}, frame
    return charts.reason_cost_spec(frame, rows[0].currency), frame


@st.cache_data(ttl=TTL_SECONDS)
def rightsizing_report(
    url: str, start: datetime, end: datetime, priced_at: datetime, team: str | None
) -> RightsizingReport:
    """:func:`finops.savings.rightsizing.rightsizing` of the jobs of ``team`` (None: every team) over the period,
    with the default thresholds, the price catalog in force (:func:`catalog`) and its rates at ``priced_at`` (pass
    it rounded to the minute, so it caches), as ``gpu-finops rightsizing`` and ``/api/v1/rightsizing``."""
    with session_factory(engine(url))() as session:
        return rightsizing(session, start, end, catalog=catalog(url), priced_at=priced_at, team=team)


@st.cache_data(ttl=TTL_SECONDS)
def efficiency(url: str, start: datetime, end: datetime, team: str | None) -> EfficiencyReport:
    """:func:`finops.savings.efficiency.efficiency_report` of the jobs of ``team`` (None: every team) over the
    period, with the ``FINOPS_EFFICIENCY_*`` thresholds, as ``gpu-finops report --by efficiency`` and
    ``/api/v1/efficiency``."""
    with session_factory(engine(url))() as session:
        return efficiency_report(session, start, end, policy=settings().efficiency_policy, team=team)


@st.cache_data(ttl=TTL_SECONDS)
def commitments(url: str, end: datetime, days: int) -> CommitmentReport:
    """:func:`finops.savings.commitments.commitment_report` of the ``days`` whole days before ``end`` (floored to
    its hour) at the rates in force then, with the price catalog in force (:func:`catalog`): fleet-wide, as
    ``gpu-finops commitments`` and ``/api/v1/commitments`` (which a team token may not read)."""
    with session_factory(engine(url))() as session:
        return commitment_report(session, catalog(url), end, days)


@st.cache_data(ttl=TTL_SECONDS)
def commitment_curve(url: str, end: datetime, days: int, model: str) -> dict[str, Any]:
    """The cost curve of ``model``'s commitment in :func:`commitments` with its optimum marked
    (:func:`dashboards.charts.commitment_curve_spec`); KeyError for a model the report does not analyse."""
    report = commitments(url, end, days)
    found = {c.model: c for c in report.commitments}
    if model not in found:
        raise KeyError(f"no commitment analysis of GPU model {model!r} in this window")
    return charts.commitment_curve_spec(found[model].curve(), found[model].best, report.currency)


@st.cache_data(ttl=TTL_SECONDS)
def freshness(url: str, now: datetime) -> list[NodeFreshness]:
    """:func:`finops.analysis.quality.node_freshness` at ``now`` (pass it rounded to the minute, so it caches)."""
    with session_factory(engine(url))() as session:
        return node_freshness(session, now)


@st.cache_data(ttl=TTL_SECONDS)
def untimely(url: str, since: datetime) -> list[UntimelyNode]:
    """:func:`finops.analysis.quality.untimely_by_node`: nodes with readings refused for their time since ``since``
    (pass it rounded to the minute, so it caches)."""
    with session_factory(engine(url))() as session:
        return untimely_by_node(session, since)


@st.cache_data(ttl=TTL_SECONDS)
def nodes(url: str, scope: Scope = EVERYTHING) -> list[str]:
    """:func:`finops.analysis.dashboard_queries.node_names` of the scope's cluster and partition (nodes have no
    team)."""
    with session_factory(engine(url))() as session:
        return node_names(session, scope.cluster, scope.partition)


@st.cache_data(ttl=TTL_SECONDS)
def job_series(url: str, job_id: str, until: datetime, scope: Scope = EVERYTHING) -> JobTelemetry:
    """:func:`finops.analysis.telemetry.job_telemetry` of ``job_id`` of the scope's cluster and team up to ``until``
    (rounded to the minute): a team member sees only their team's jobs of that id."""
    with session_factory(engine(url))() as session:
        return job_telemetry(session, job_id, until, cluster=scope.cluster, team=scope.team)


@st.cache_data(ttl=TTL_SECONDS)
def node_telemetry(
    url: str, start: datetime, end: datetime, width_seconds: int, scope: Scope = EVERYTHING
) -> list[NodeBucket]:
    """:func:`finops.analysis.telemetry.node_buckets` for the period, bucket width and the scope's cluster and
    partition (readings have no team)."""
    with session_factory(engine(url))() as session:
        return node_buckets(session, start, end, width_seconds, cluster=scope.cluster, partition=scope.partition)


@st.cache_data(ttl=TTL_SECONDS)
def nodes_page(url: str, start: datetime, end: datetime, width_seconds: int, scope: Scope = EVERYTHING) -> NodeViews:
    """The charts and tables of the GPUs & nodes page (:func:`dashboards.node_views.node_views`) of
    :func:`node_telemetry` for the period, bucket width and the scope's cluster and partition."""
    return node_views(node_telemetry(url, start, end, width_seconds, scope), width_seconds, start, end)


@st.cache_data(ttl=TTL_SECONDS)
def fabric(
    prometheus: str, start: datetime, end: datetime, step_seconds: int, nodes: tuple[str, ...] | None
) -> list[Throughput]:
    """:func:`finops.analysis.telemetry.fabric_throughput` from the Prometheus at ``prometheus`` (only ``nodes``
    when given). Raises :class:`finops.ingest.prometheus.PrometheusError` when it does not answer."""
    client = PrometheusClient(prometheus, timeout_seconds=30.0)
    try:
        return fabric_throughput(client, start, end, step_seconds, nodes=nodes)
    finally:
        client.close()
