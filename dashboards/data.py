"""Cached access to the database for the pages: the engine once per process, query results for a minute.

Every filter is an argument of the cached function, so one viewer never sees another's filtered data.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import streamlit as st
from sqlalchemy import Engine

from finops.budgets import BudgetStatus, budget_status, month_start
from finops.db import make_engine, require_migrated, session_factory
from finops.idle import EpisodeView, list_episodes
from finops.quality import NodeFreshness, node_freshness
from finops.report import GroupBy, ReportRow, cost_report
from finops.settings import Settings
from finops.timeutil import utc_now

TTL_SECONDS = 60


def database_url() -> str:
    """The configured database (``FINOPS_DATABASE_URL``); part of every cache key below."""
    return Settings().effective_database_url


@st.cache_resource
def engine(url: str) -> Engine:
    """The engine for ``url``, once per process, checked to be migrated."""
    created = make_engine(url)
    require_migrated(created)
    return created


@st.cache_data(ttl=TTL_SECONDS)
def report(url: str, start: datetime, end: datetime, by: GroupBy) -> list[ReportRow]:
    """:func:`finops.report.cost_report` for the period."""
    with session_factory(engine(url))() as session:
        return cost_report(session, start, end, by)


@st.cache_data(ttl=TTL_SECONDS)
def budgets(url: str, at: datetime) -> list[BudgetStatus]:
    """:func:`finops.budgets.budget_status` at ``at``."""
    with session_factory(engine(url))() as session:
        return budget_status(session, at)


@st.cache_data(ttl=TTL_SECONDS)
def episodes(url: str, start: datetime, end: datetime) -> list[EpisodeView]:
    """:func:`finops.idle.list_episodes` for the period."""
    with session_factory(engine(url))() as session:
        return list_episodes(session, start, end)


@st.cache_data(ttl=TTL_SECONDS)
def freshness(url: str, now: datetime) -> list[NodeFreshness]:
    """:func:`finops.quality.node_freshness` at ``now`` (pass it rounded to the minute, so it caches)."""
    with session_factory(engine(url))() as session:
        return node_freshness(session, now)


def period_from_sidebar() -> tuple[datetime, datetime]:
    """The period picked in the sidebar (default: the last 7 days), as UTC [start, end) on whole hours."""
    now = utc_now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    choice = st.sidebar.radio("Period", ["Last 7 days", "Month to date", "Last 30 days"], key="period")
    if choice == "Month to date":
        return month_start(now - timedelta(hours=1)), now
    days = 30 if choice == "Last 30 days" else 7
    return now - timedelta(days=days), now
