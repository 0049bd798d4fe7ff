"""Teams: cost, use and waste per team for the period (the same numbers as ``gpu-finops report``)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import data
from finops.report import report_dicts

st.title("Cost by team")
start, end = data.period_from_sidebar()
rows = data.report(data.database_url(), start, end, "team")
if not rows:
    st.info("No cost data in this period yet.")
    st.stop()
frame = pd.DataFrame(report_dicts(rows, "team"))
currency = rows[0].currency
chart_data = frame.assign(
    used=frame["used_cost"].astype(float),
    idle=frame["idle_cost"].astype(float),
    unallocated=frame.apply(lambda r: float(r["allocated_cost"]) if r["team"] == "__unallocated__" else 0.0, axis=1),
).melt(id_vars="team", value_vars=["used", "idle", "unallocated"], var_name="kind", value_name="cost")
st.altair_chart(
    alt.Chart(chart_data)
    .mark_bar()
    .encode(x=alt.X("cost:Q", title=f"Cost ({currency})"), y=alt.Y("team:N", sort="-x", title="Team"), color="kind:N"),
    width="stretch",
)
st.dataframe(frame, hide_index=True, width="stretch")
st.download_button("Download CSV", frame.to_csv(index=False), file_name="cost-by-team.csv", mime="text/csv")
