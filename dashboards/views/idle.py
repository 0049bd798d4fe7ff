"""Idle GPUs: allocated GPUs that sat at or below the idle threshold for at least the window, each with its probable
waste reason and evidence (an episode on a GPU whose model has no price is shown unpriced, with the model and the fix,
and left out of the cost, not counted as 0)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import data, filters
from dashboards.format import cents, headline, table
from dashboards.measures import EPISODE_COST, episode_cost_caption
from finops.analysis.idle import episode_totals

st.title("Idle GPUs")
view = filters.sidebar()
st.caption(view.describe())
st.caption(episode_cost_caption(data.settings()))
found = data.episodes(data.database_url(), view.start, view.end, view.scope)
if not found:
    st.success("No idle episodes in this period.")
    st.stop()
currency = found[0].currency
(totals,) = [t for t in episode_totals(found) if t.currency == currency]
if totals.all_unpriced:
    st.metric(EPISODE_COST, "unpriced")
else:
    headline(EPISODE_COST, totals.cost, currency)
fixes = {e.model: e.unpriced_fix for e in found if e.cost is None}
if totals.unpriced_gpu_hours:
    st.warning(
        f"{sum(totals.unpriced_gpu_hours.values()):,.2f} GPU-hours of idle episodes have no price, so their cost is "
        "not in the figure above (it is unknown, not 0): "
        + "; ".join(
            f"{model}: {hours:,.2f} GPU-hours, {fixes[model]}"
            for model, hours in sorted(totals.unpriced_gpu_hours.items())
        )
    )
frame = pd.DataFrame(
    [
        {
            "team": e.team,
            "user": e.user,
            "job": e.job_id,
            "node": e.node,
            "gpu": e.gpu_index,
            "start": e.start,
            "hours": round(e.hours, 2),
            "memory_held": e.memory_held,
            "episode_cost": None if e.cost is None else cents(e.cost),
            "reason": "" if e.verdict is None else e.verdict.title,
            "evidence": e.evidence or "",
            "unpriced_model": e.unpriced_model or "",
        }
        for e in found
    ]
)
table(frame, "idle-episodes.csv", currency=currency)
