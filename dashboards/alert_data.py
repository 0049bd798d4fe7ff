"""Cached access to the alerts the alert engine keeps, for the Alerts page (:mod:`alerts.store`).

Like :mod:`dashboards.data`: every filter is an argument of the cached function and results are kept for
:data:`dashboards.data.TTL_SECONDS`; pass ``now`` rounded to the minute and periods in whole hours, so that
repeated views hit the cache.
"""

from __future__ import annotations

from datetime import datetime

import streamlit as st

from alerts.store import AlertView, SilenceView, list_silences, select_alerts
from dashboards.data import TTL_SECONDS, engine
from finops.db.engine import session_factory


@st.cache_data(ttl=TTL_SECONDS)
def firing(url: str, now: datetime, team: str | None = None) -> list[AlertView]:
    """The alerts firing at ``now`` (only those labelled ``team`` when given), newest first, each with whether a
    silence or an inhibition mutes it (:func:`alerts.store.select_alerts`)."""
    with session_factory(engine(url))() as session:
        return select_alerts(session, now, "firing", team=team)


@st.cache_data(ttl=TTL_SECONDS)
def resolved(url: str, start: datetime, end: datetime, now: datetime, team: str | None = None) -> list[AlertView]:
    """The resolved alerts that held at some instant of [start, end) (only those labelled ``team`` when given),
    newest first (:func:`alerts.store.select_alerts`)."""
    with session_factory(engine(url))() as session:
        return select_alerts(session, now, "resolved", start=start, end=end, team=team)


@st.cache_data(ttl=TTL_SECONDS)
def silences(url: str, now: datetime, include_expired: bool = False) -> list[SilenceView]:
    """The silences not yet ended at ``now`` (every stored one with ``include_expired``), ending soonest first
    (:func:`alerts.store.list_silences`)."""
    with session_factory(engine(url))() as session:
        return list_silences(session, now, include_expired=include_expired)
