"""Data quality: the share of GPU time attributed to jobs and metered by readings, and each node's freshness."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import data
from finops.quality import coverage
from finops.timeutil import utc_now

st.title("Data quality")
start, end = data.period_from_sidebar()
url = data.database_url()
quality = coverage(data.report(url, start, end, "team"))
left, middle, right = st.columns(3)
left.metric("GPU-hours held by a job", f"{quality.attributed_share:.1%}")
middle.metric("Held GPU-hours with readings", f"{quality.metered_share:.1%}")
right.metric("Held GPU-hours without readings", f"{quality.unmetered_gpu_seconds / 3600:,.1f}")
st.subheader("Collectors: newest reading per node")
nodes = data.freshness(url, utc_now().replace(second=0, microsecond=0))
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
st.dataframe(frame, hide_index=True, width="stretch")
st.download_button("Download CSV", frame.to_csv(index=False), file_name="collector-freshness.csv", mime="text/csv")
