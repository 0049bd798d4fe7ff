"""Altair charts shared by the pages; every axis title names its unit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import altair as alt
import pandas as pd

from finops.costmodel import CENT
from finops.dashboard_queries import DailyCost

LEGEND_LIMIT = 20
"""More series than this and the colour legend is left out (the table under the chart names them)."""


def time_x(field: str, title: str = "Time (UTC)", start: datetime | None = None, end: datetime | None = None) -> alt.X:
    """An x axis of UTC instants (shown in UTC whatever the viewer's time zone), over [start, end] when given."""
    domain = [start.isoformat(), end.isoformat()] if start is not None and end is not None else alt.Undefined
    return alt.X(f"{field}:T", title=title, scale=alt.Scale(type="utc", domain=domain))


def legend(series: int) -> alt.Legend | None:
    """A colour legend, or none beyond :data:`LEGEND_LIMIT` series."""
    return alt.Legend() if series <= LEGEND_LIMIT else None


def daily_frame(days: Sequence[DailyCost], currency: str) -> pd.DataFrame:
    """One row per day and team: ``day (UTC)``, ``team``, ``cost (<currency>)``, ``used cost (…)``,
    ``idle cost (…)`` in cents."""
    columns = ["day (UTC)", "team", f"cost ({currency})", f"used cost ({currency})", f"idle cost ({currency})"]
    return pd.DataFrame(
        [
            [
                d.day.date(),
                d.team,
                d.allocated_cost.quantize(CENT),
                d.used_cost.quantize(CENT),
                d.idle_cost.quantize(CENT),
            ]
            for d in days
        ],
        columns=columns,
    )


def daily_spend_chart(days: Sequence[DailyCost], currency: str, start: datetime, end: datetime) -> alt.Chart:
    """Stacked bars: spend per UTC day over the days of the period [start, end), one colour per team."""
    frame = pd.DataFrame(
        [
            {"day": d.day, "end": d.day + timedelta(days=1), "team": d.team, "cost": float(d.allocated_cost)}
            for d in days
        ],
        columns=["day", "end", "team", "cost"],
    )
    first = start.replace(hour=0, minute=0, second=0, microsecond=0)
    last = (end - timedelta(seconds=1)).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=time_x("day", "Day (UTC)", first, last),
            x2="end:T",
            y=alt.Y("sum(cost):Q", title=f"Spend ({currency})", stack="zero"),
            color=alt.Color("team:N", title="Team", legend=legend(frame["team"].nunique())),
            tooltip=[
                alt.Tooltip("utcyearmonthdate(day):T", title="Day (UTC)"),
                alt.Tooltip("team:N", title="Team"),
                alt.Tooltip("sum(cost):Q", title=f"Spend ({currency})", format=",.2f"),
            ],
        )
    )
