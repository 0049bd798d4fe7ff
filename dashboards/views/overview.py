"""Overview: spend, utilisation, idle cost and budgets for the period."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import data
from dashboards.format import money
from finops.report import fleet_summary
from finops.timeutil import utc_now

st.title("GPU spend overview")
start, end = data.period_from_sidebar()
rows = data.report(data.database_url(), start, end, "team")
if not rows:
    st.info("No cost data in this period yet. Run the collectors and `gpu-finops rollup`, or `gpu-finops demo`.")
    st.stop()
summary = fleet_summary(rows)
spend, used, idle, utilization = st.columns(4)
spend.metric("GPU capacity cost", money(summary.capacity_cost, summary.currency))
used.metric("Used (useful work)", money(summary.used_cost, summary.currency))
idle.metric("Idle cost (waste)", money(summary.idle_cost, summary.currency))
utilization.metric("Utilisation of allocated GPUs", f"{summary.utilization:.1%}")
st.caption(
    f"{summary.allocated_share:.1%} of GPU-hours were held by a job. Period {start:%Y-%m-%d %H:%M} – "
    f"{end:%Y-%m-%d %H:%M} UTC."
)

st.subheader("Budgets this month")
statuses = data.budgets(data.database_url(), utc_now())
if statuses:
    table = pd.DataFrame(
        [
            {"team": s.team, "budget": money(s.budget, s.currency), "spent": money(s.spent, s.currency),
             "used %": f"{s.used_percent}", "forecast month-end": money(s.forecast, s.currency)}
            for s in statuses
        ]
    )  # fmt: skip
    st.dataframe(table, hide_index=True, width="stretch")
else:
    st.write("No budgets set. `gpu-finops budget set TEAM AMOUNT` adds one.")
