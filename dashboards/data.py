"""Cached access to the database for the pages: the engine once per process, query results for a minute.

Every filter is an argument of the cached function, so one viewer never sees another's filtered data. Pass
instants rounded (whole hours for periods, minutes for "now"), so that repeated views hit the cache. The ledger
is read once per period and filters (:func:`cube`); the reports and the spend by day are taken from that read.
"""

from __future__ import annotations

from datetime import datetime

import streamlit as st
from sqlalchemy import Engine

from finops.catalog_store import catalog_in_force
from finops.dashboard_queries import (
    CubeBy,
    DailyCost,
    FilterChoices,
    JobTelemetry,
    LedgerCube,
    MonthOverview,
    NodeBucket,
    Throughput,
    fabric_throughput,
    filter_choices,
    job_telemetry,
    ledger_cube,
    month_overview,
    node_buckets,
    node_names,
)
from finops.db import make_engine, require_migrated, session_factory
from finops.idle import EpisodeView, list_episodes
from finops.prices import PriceCatalog, load_catalog
from finops.prometheus_pull import PrometheusClient
from finops.quality import NodeFreshness, node_freshness
from finops.report import ReportRow
from finops.settings import Settings

TTL_SECONDS = 60
NO_CHOICES = FilterChoices([], [], [])


def database_url() -> str:
    """The configured database (``FINOPS_DATABASE_URL``); part of every cache key below."""
    return Settings().effective_database_url


def prometheus_url() -> str:
    """The configured Prometheus (``FINOPS_PROMETHEUS_URL``), '' when none."""
    return Settings().prometheus_url


@st.cache_resource
def engine(url: str) -> Engine:
    """The engine for ``url``, once per process, checked to be migrated."""
    created = make_engine(url)
    require_migrated(created)
    return created


@st.cache_data(ttl=TTL_SECONDS)
def catalog(url: str) -> PriceCatalog:
    """The price catalog in force (:func:`finops.catalog_store.catalog_in_force`): the newest imported one, else
    the configured file (``FINOPS_PRICE_CATALOG``, default the packaged one)."""
    with session_factory(engine(url))() as session:
        return catalog_in_force(session, load_catalog(Settings().price_catalog))


@st.cache_data(ttl=TTL_SECONDS)
def choices(url: str) -> FilterChoices:
    """:func:`finops.dashboard_queries.filter_choices`."""
    with session_factory(engine(url))() as session:
        return filter_choices(session)


@st.cache_resource(ttl=TTL_SECONDS, max_entries=16)
def cube(
    url: str,
    start: datetime,
    end: datetime,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> LedgerCube:
    """:func:`finops.dashboard_queries.ledger_cube` for the period and filters: the one read of the ledger that
    the reports and the spend by day below are taken from, shared by the pages for a minute.

    Kept as a resource (the object itself, not a pickled copy: a month of a large cluster is ~10,000 cells, whose
    copy would cost more than the pages' own work), so it is never changed: the functions below read it and
    return their own results, which are cached per argument like every query result."""
    with session_factory(engine(url))() as session:
        return ledger_cube(session, start, end, cluster=cluster, team=team, partition=partition)


@st.cache_data(ttl=TTL_SECONDS)
def report(
    url: str,
    start: datetime,
    end: datetime,
    by: CubeBy,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> list[ReportRow]:
    """The rows of :func:`finops.report.cost_report` for the period and filters, by team, job or user."""
    return cube(url, start, end, cluster, team, partition).report(by)


@st.cache_data(ttl=TTL_SECONDS)
def wasters(
    url: str,
    start: datetime,
    end: datetime,
    by: CubeBy,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> list[ReportRow]:
    """:func:`finops.dashboard_queries.top_idle` of the report by team or job: the five biggest idle costs (only
    these five are kept: a month's report by job has thousands of rows)."""
    return cube(url, start, end, cluster, team, partition).top_idle(by)


@st.cache_data(ttl=TTL_SECONDS)
def daily(
    url: str,
    start: datetime,
    end: datetime,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> list[DailyCost]:
    """Spend per UTC day and team for the period and filters (:meth:`LedgerCube.daily`)."""
    return cube(url, start, end, cluster, team, partition).daily()


@st.cache_data(ttl=TTL_SECONDS)
def month(
    url: str, at: datetime, cluster: str | None = None, team: str | None = None, partition: str | None = None
) -> MonthOverview:
    """:func:`finops.dashboard_queries.month_overview` at ``at`` (rounded to the minute) for the filters."""
    with session_factory(engine(url))() as session:
        return month_overview(session, at, cluster=cluster, team=team, partition=partition)


@st.cache_data(ttl=TTL_SECONDS)
def episodes(
    url: str,
    start: datetime,
    end: datetime,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> list[EpisodeView]:
    """:func:`finops.idle.list_episodes` for the period and filters."""
    with session_factory(engine(url))() as session:
        return list_episodes(session, start, end, cluster=cluster, team=team, partition=partition)


@st.cache_data(ttl=TTL_SECONDS)
def freshness(url: str, now: datetime) -> list[NodeFreshness]:
    """:func:`finops.quality.node_freshness` at ``now`` (pass it rounded to the minute, so it caches)."""
    with session_factory(engine(url))() as session:
        return node_freshness(session, now)


@st.cache_data(ttl=TTL_SECONDS)
def nodes(url: str, cluster: str | None = None, partition: str | None = None) -> list[str]:
    """:func:`finops.dashboard_queries.node_names` of the filters."""
    with session_factory(engine(url))() as session:
        return node_names(session, cluster, partition)


@st.cache_data(ttl=TTL_SECONDS)
def job_series(url: str, job_id: str, until: datetime, cluster: str | None = None) -> JobTelemetry:
    """:func:`finops.dashboard_queries.job_telemetry` of ``job_id`` up to ``until`` (rounded to the minute)."""
    with session_factory(engine(url))() as session:
        return job_telemetry(session, job_id, until, cluster=cluster)


@st.cache_data(ttl=TTL_SECONDS)
def node_telemetry(
    url: str,
    start: datetime,
    end: datetime,
    width_seconds: int,
    cluster: str | None = None,
    partition: str | None = None,
) -> list[NodeBucket]:
    """:func:`finops.dashboard_queries.node_buckets` for the period, bucket width and filters."""
    with session_factory(engine(url))() as session:
        return node_buckets(session, start, end, width_seconds, cluster=cluster, partition=partition)


@st.cache_data(ttl=TTL_SECONDS)
def fabric(
    prometheus: str, start: datetime, end: datetime, step_seconds: int, nodes: tuple[str, ...] | None
) -> list[Throughput]:
    """:func:`finops.dashboard_queries.fabric_throughput` from the Prometheus at ``prometheus`` (only ``nodes``
    when given). Raises :class:`finops.prometheus_pull.PrometheusError` when it does not answer."""
    client = PrometheusClient(prometheus, timeout_seconds=30.0)
    try:
        return fabric_throughput(client, start, end, step_seconds, nodes=nodes)
    finally:
        client.close()
