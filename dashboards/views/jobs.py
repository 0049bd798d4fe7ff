"""Jobs: cost, GPU-hours, utilisation and idle cost per job for the period (the numbers of
``gpu-finops report --by job``), most expensive first."""

from __future__ import annotations

from decimal import Decimal

import pandas as pd
import streamlit as st

from dashboards import data
from dashboards.format import money
from finops.costmodel import CENT
from finops.models import UNALLOCATED_TEAM

st.title("Jobs")
start, end = data.period_from_sidebar()
rows = [row for row in data.report(data.database_url(), start, end, "job") if row.key != UNALLOCATED_TEAM]
if not rows:
    st.info("No job held a GPU in this period.")
    st.stop()
currency = rows[0].currency
frame = pd.DataFrame(
    [
        {
            "job": row.key,
            "team": row.team,
            "user": row.user,
            "GPU-hours": round(row.allocated_gpu_seconds / 3600, 2),
            "utilisation": (
                row.used_gpu_seconds / (row.allocated_gpu_seconds - row.unmetered_gpu_seconds)
                if row.allocated_gpu_seconds > row.unmetered_gpu_seconds
                else None
            ),
            f"cost ({currency})": row.allocated_cost.quantize(CENT),
            f"idle cost ({currency})": row.idle_cost.quantize(CENT),
        }
        for row in sorted(rows, key=lambda r: r.allocated_cost, reverse=True)
    ]
)
st.metric("Cost of jobs", money(sum((row.allocated_cost for row in rows), Decimal(0)), currency))
st.dataframe(
    frame,
    hide_index=True,
    width="stretch",
    column_config={"utilisation": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent")},
)
st.download_button("Download CSV", frame.to_csv(index=False), file_name="cost-by-job.csv", mime="text/csv")
