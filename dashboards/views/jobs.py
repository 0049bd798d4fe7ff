"""Jobs: cost, GPU-hours, utilisation, hardware activity and unused allocated cost per job for the period (the
numbers of ``gpu-finops report --by job``), most expensive first; utilisation against SM activity per job; then one
job's per-GPU utilisation and power over time."""

from __future__ import annotations

from decimal import Decimal

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import activity, charts, data, filters
from dashboards.format import duration, headline, money, table
from dashboards.measures import unused_cost_caption
from finops.analysis.report import NOT_MEASURED
from finops.db.models import UNALLOCATED_TEAM
from finops.timeutil import utc_now

MAX_GPU_LINES = 32  # a job on more GPUs is drawn as their mean, with the lowest and highest GPU around it

st.title("Jobs")
view = filters.sidebar()
url = data.database_url()
st.caption(view.describe())
rows = [row for row in data.report(url, view.start, view.end, "job", view.scope) if row.key != UNALLOCATED_TEAM]
if not rows:
    st.info("No job held a GPU in this period.")
    st.stop()
currency = rows[0].currency
headline("Cost of jobs", sum((row.allocated_cost for row in rows), Decimal(0)), currency)
st.caption(unused_cost_caption(data.settings()))
st.caption(activity.table_caption(data.settings().efficiency_policy))
jobs = data.job_table(url, view.start, view.end, view.scope)
table(jobs, "cost-by-job.csv", currency=currency, placeholder=NOT_MEASURED)

st.subheader("Utilisation against SM activity")
scatter = data.job_activity_chart(url, view.start, view.end, currency, view.scope)
about = activity.scatter_caption(scatter.drawn, scatter.left_out, money(scatter.left_out_cost, currency))
if scatter.spec:
    charts.render(scatter.spec)
    st.caption(about)
else:
    st.info(about)

st.subheader("A job's GPUs over time")
job_ids = list(dict.fromkeys(row.key for row in rows))  # the report's order: most expensive first
job_id = filters.url_selectbox("job", "Job (most expensive first)", job_ids, container=st.container())
series = data.job_series(url, job_id, utc_now().replace(second=0, microsecond=0), view.scope)
if not series.points:
    st.info(f"No readings from the GPUs job {job_id} held.")
    st.stop()
if series.jobs > 1:
    st.caption(f"{series.jobs} jobs carry the id {job_id} (one per cluster): their GPUs are shown together.")
points = pd.DataFrame(
    [
        {
            "time (UTC)": p.ts,
            "GPU": f"{p.node}/gpu{p.gpu_index}",
            "utilisation (%)": None if p.utilization is None else round(p.utilization * 100, 2),
            "power (W)": None if p.power_watts is None else round(p.power_watts, 1),
        }
        for p in series.points
    ]
)
st.caption(
    f"{series.gpus} GPU{'s' if series.gpus != 1 else ''} from {series.start:%Y-%m-%d %H:%M} to "
    f"{series.end:%Y-%m-%d %H:%M} UTC; each point is the mean of a GPU's readings over "
    f"{duration(series.bucket_seconds)}."
)
time_axis = charts.time_x("time (UTC)")
for column, title in (("utilisation (%)", "GPU utilisation (%)"), ("power (W)", "Board power (W)")):
    if series.gpus <= MAX_GPU_LINES:
        chart = (
            alt.Chart(points)
            .mark_line()
            .encode(
                x=time_axis,
                y=alt.Y(f"{column}:Q", title=title),
                color=alt.Color("GPU:N", legend=charts.legend(series.gpus)),
                tooltip=["time (UTC):T", "GPU:N", f"{column}:Q"],
            )
        )
    else:
        spread = points.groupby("time (UTC)")[column].agg(["mean", "min", "max"]).reset_index()
        band = alt.Chart(spread).mark_area(opacity=0.3).encode(x=time_axis, y=alt.Y("min:Q", title=title), y2="max:Q")
        chart = band + alt.Chart(spread).mark_line().encode(x=time_axis, y=alt.Y("mean:Q", title=title))
    st.altair_chart(chart, width="stretch")
if series.gpus > MAX_GPU_LINES:
    st.caption(f"{series.gpus} GPUs: the line is their mean, the band runs from the lowest to the highest GPU.")
table(points, f"job-{job_id.replace('/', '_')}-gpus.csv")
