"""Data quality: the share of GPU time attributed to jobs and metered by readings, the GPU-hours whose model has
no price (by model, with the fix), each node's freshness, and the nodes whose readings were refused for their time
(a clock off) in the last week."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import streamlit as st

from dashboards import data, filters
from dashboards.format import headline, table
from finops.analysis.quality import coverage
from finops.timeutil import utc_now

UNTIMELY_DAYS = timedelta(days=7)
"""How far back the page lists readings refused for their time."""

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
minute = utc_now().replace(second=0, microsecond=0)
st.subheader("Collectors: readings refused for their time (last 7 days)")
untimely = data.untimely(url, minute - UNTIMELY_DAYS)
if untimely:
    st.warning(
        "These nodes sent readings stamped outside what the service accepts: `future` means the node's clock is "
        "ahead of the service's (fix its NTP/chrony); `too_old`, older than the sample retention. The readings "
        "were refused, not stored: their GPU-hours show as unmetered."
    )
    frame = pd.DataFrame(
        [
            {"node": u.node, "refused as": u.reason, "readings refused": u.readings, "first (UTC)": u.first_at,
             "last (UTC)": u.last_at, "newest refusal": u.last_error}
            for u in untimely
        ]
    )  # fmt: skip
    table(frame, "untimely-readings.csv")
else:
    st.write("No reading was refused for its time.")
st.subheader("Collectors: newest reading per node")
nodes = data.freshness(url, minute)
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
