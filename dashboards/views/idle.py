"""Idle GPUs: allocated GPUs that sat at or below the idle threshold for at least the window."""

from __future__ import annotations

from decimal import Decimal

import pandas as pd
import streamlit as st

from dashboards import data
from dashboards.format import money

st.title("Idle GPUs")
start, end = data.period_from_sidebar()
found = data.episodes(data.database_url(), start, end)
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
            "cost": money(e.cost, currency),
        }
        for e in found
    ]
)
st.dataframe(frame, hide_index=True, width="stretch")
st.download_button("Download CSV", frame.to_csv(index=False), file_name="idle-episodes.csv", mime="text/csv")
