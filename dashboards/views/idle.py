"""Idle GPUs: allocated GPUs that sat at or below the idle threshold for at least the window."""

from __future__ import annotations

from decimal import Decimal

import pandas as pd
import streamlit as st

from dashboards import data, filters
from dashboards.format import cents, money, table

st.title("Idle GPUs")
view = filters.sidebar()
st.caption(view.describe())
found = data.episodes(data.database_url(), view.start, view.end, view.scope)
if not found:
    st.success("No idle episodes in this period.")
    st.stop()
currency = found[0].currency
st.metric("Cost of idle episodes", money(sum((e.cost for e in found), Decimal(0)), currency))
frame = pd.DataFrame(
    [
        {
            "team": e.team,
            "user": e.user,
            "job": e.job_id,
            "node": e.node,
            "gpu": e.gpu_index,
            "start (UTC)": e.start,
            "hours": round(e.hours, 2),
            "memory held": e.memory_held,
            f"cost ({currency})": cents(e.cost),
        }
        for e in found
    ]
)
table(frame, "idle-episodes.csv", currency=currency)
