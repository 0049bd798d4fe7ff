"""Data quality: the share of GPU time attributed to jobs and metered by readings, the GPU-hours whose model has
no price (by model, with the fix), and each node's freshness."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import data, filters
from dashboards.format import headline, table
from finops.analysis.quality import coverage
from finops.timeutil import utc_now

st.title("Data quality")
view = filters.sidebar()
url = data.database_url()
st.caption(view.describe())
quality = coverage(data.report(url, view.start, view.end, "team", view.scope))
left, middle, right = st.columns(3)
left.metric("GPU-hours held by a job", f"{quality.attributed_share:.1%}")
middle.metric("Held GPU-hours with readings", f"{quality.metered_share:.1%}")
headline("Held GPU-hours without readings", quality.unmetered_gpu_seconds / 3600, "GPU-h", place=right)
st.subheader("GPU-hours without a price")
unpriced = data.unpriced(url, view.start, view.end, view.scope)
if unpriced:
    headline("GPU-hours counted but not costed", sum(u.gpu_hours for u in unpriced), "GPU-h")
    frame = pd.DataFrame([{"model": u.model, "GPU-hours": round(u.gpu_hours, 2), "fix": u.fix} for u in unpriced])
    table(frame, "unpriced-gpu-hours.csv")
else:
    st.write("Every GPU-hour in this period has a price.")
st.subheader("Collectors: newest reading per node")
nodes = data.freshness(url, utc_now().replace(second=0, microsecond=0))
if view.cluster or view.partition:
    wanted = set(data.nodes(url, view.scope))
    nodes = [n for n in nodes if n.node in wanted]
    st.caption("Nodes of the chosen cluster and partition; the team filter does not apply to collectors.")
if not nodes:
    st.info("No node has reported yet.")
    st.stop()
frame = pd.DataFrame(
    [
        {
            "node": n.node,
            "GPUs": n.gpus,
            "newest reading (UTC)": n.last_reading,
            "silent for (minutes)": None if n.silent_seconds is None else round(n.silent_seconds / 60, 1),
        }
        for n in nodes
    ]
)
table(frame, "collector-freshness.csv")
