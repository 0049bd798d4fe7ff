"""Alerts: the alerts firing now (and whether a silence or an inhibition mutes them), those resolved in the period,
and the silences (the numbers of ``gpu-finops alerts list`` and ``gpu-finops alerts silences``).

The team filter keeps the alerts whose ``team`` label is the chosen team (budget, spend-anomaly, idle-GPU and
throttling alerts); collector-silent, GPU-lost and data-quality alerts carry no team and are not shown while a
team is chosen. Silences match labels, not teams, so all of them are listed whatever the team. Alerts carry no
cluster or partition, so this page offers neither filter. Someone who sees one team sees their team's alerts and
not the silences (which may name other teams); the "muted" column says whether one mutes their alert.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import streamlit as st

from alerts.engine import RESOLVED_RETENTION
from dashboards import alert_data, data, filters, login
from dashboards.format import table
from finops.timeutil import utc_now

SILENCE_CHOICES = {"current": "In force or upcoming", "all": "All, expired included"}


def _labels(labels: Mapping[str, str]) -> str:
    """``job="501", team="alpha"``: the labels that identify an alert, without its rule and severity."""
    return ", ".join(f'{name}="{value}"' for name, value in sorted(labels.items()) if name not in ("rule", "severity"))


st.title("Alerts")
view = filters.sidebar(cluster=False, partition=False)
url = data.database_url()
now = utc_now().replace(second=0, microsecond=0)
st.caption(view.describe())
if view.team is not None:
    st.caption(
        f"Alerts labelled team {view.team}; collector-silent, GPU-lost and data-quality alerts carry no team and are "
        "not shown. Silences are listed whatever the team."
    )

st.subheader("Firing now")
firing = alert_data.firing(url, now, view.team)
if not firing:
    st.success("No alert is firing.")
else:
    left, right = st.columns(2)
    left.metric("Firing alerts", len(firing))
    right.metric("Muted by a silence or an inhibition", sum(1 for a in firing if a.muted))
    frame = pd.DataFrame(
        [
            {
                "severity": a.severity,
                "rule": a.rule,
                "labels": _labels(a.labels),
                "since (UTC)": a.starts_at,
                "summary": a.summary,
                "muted": a.muted,
            }
            for a in firing
        ]
    )
    table(frame, "alerts-firing.csv")

st.subheader("Resolved in the period")
resolved = alert_data.resolved(url, view.start, view.end, now, view.team)
if not resolved:
    st.info(
        "No alert that held in this period has resolved "
        f"(resolved alerts are kept for {RESOLVED_RETENTION.days} days after they end)."
    )
else:
    st.metric("Resolved alerts", len(resolved))
    frame = pd.DataFrame(
        [
            {
                "severity": a.severity,
                "rule": a.rule,
                "labels": _labels(a.labels),
                "start": a.starts_at,
                "end": a.ends_at,
                "hours": None if a.ends_at is None else round((a.ends_at - a.starts_at).total_seconds() / 3600, 2),
                "summary": a.summary,
            }
            for a in resolved
        ]
    )
    table(frame, "alerts-resolved.csv")

st.subheader("Silences")
if not login.current().sees_everything:
    st.caption("Silences match the labels of every team's alerts: they are listed to viewers only.")
    st.stop()
shown = filters.url_selectbox(
    "silences", "Silences", list(SILENCE_CHOICES), format_func=SILENCE_CHOICES.__getitem__, container=st.container()
)
found = alert_data.silences(url, now, include_expired=shown == "all")
if not found:
    st.info("No silence." if shown == "all" else "No silence in force or upcoming.")
else:
    frame = pd.DataFrame(
        [
            {
                "id": s.id,
                "state": "active" if s.active else ("expired" if s.ends_at <= now else "upcoming"),
                "matchers": ", ".join(s.matchers),
                "from (UTC)": s.starts_at,
                "until (UTC)": s.ends_at,
                "created by": s.created_by,
                "comment": s.comment,
            }
            for s in found
        ]
    )
    table(frame, "alert-silences.csv")
