"""GPUs & nodes: utilisation per node and hour (heatmap), board power, temperature and clocks-event (throttle)
reasons from the GPU readings; InfiniBand and storage throughput from the collectors' counters in Prometheus."""

from __future__ import annotations

from datetime import timedelta

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import charts, data, filters
from dashboards.format import duration, table
from dashboards.node_views import REASON_COLUMNS
from finops.analysis.telemetry import bucket_seconds
from finops.ingest.prometheus import PrometheusError
from finops.timeutil import utc_now

MAX_COLUMNS = 240  # time buckets across the heatmap at most: hourly up to 10 days, wider beyond

st.title("GPUs & nodes")
view = filters.sidebar(team=False, default_period="24h")
url = data.database_url()
st.caption(view.describe())
end = min(view.end, utc_now().replace(second=0, microsecond=0) + timedelta(minutes=1))
width = bucket_seconds(view.start, view.end, MAX_COLUMNS, minimum=3600)
page = data.nodes_page(url, view.start, view.end, width, view.scope)

st.subheader("Utilisation by node")
if not page.nodes:
    st.info("No GPU readings in this period (raw readings are kept for `FINOPS_SAMPLE_RETENTION_DAYS`).")
else:
    st.caption(
        f"Mean GPU utilisation of each node over {duration(width)}, {page.nodes} node{'s' if page.nodes != 1 else ''}."
    )
    charts.render(page.heatmap)
    st.subheader("Power and temperature")
    charts.render(page.power)
    charts.render(page.temperature)
    st.subheader("Clocks-event (throttle) reasons")
    charts.render(page.reasons)
    table(page.reasons_by_node, "throttle-reasons-by-node.csv", columns=REASON_COLUMNS)
    st.caption("Share of each node's readings with the reason's bit set in the GPU's clocks-event reasons bitmask.")
    with st.expander("Per node and time bucket (the heatmap's data)"):
        table(page.cells, "gpu-nodes-by-time.csv", columns=REASON_COLUMNS)

st.subheader("InfiniBand and storage throughput")
prometheus = data.prometheus_url()
if not prometheus:
    st.info(
        "InfiniBand, disk, NFS and Lustre throughput are not stored in the service database: they are on the "
        "collectors' /metrics. Set `FINOPS_PROMETHEUS_URL` to the Prometheus that scrapes the collectors "
        "(for example `http://prometheus:9090`) to show them here."
    )
    st.stop()
step = bucket_seconds(view.start, end, MAX_COLUMNS, minimum=60)
wanted = tuple(data.nodes(url, view.scope)) if view.cluster or view.partition else None
try:
    flows = data.fabric(prometheus, view.start, end, step, wanted)
except PrometheusError as exc:
    st.warning(f"Prometheus at {prometheus} did not answer: {exc}")
    st.stop()
if not flows:
    st.info(f"Prometheus at {prometheus} has no InfiniBand or storage counters from collectors in this period.")
    st.stop()
throughput = pd.DataFrame(
    [
        {
            "time (UTC)": f.ts,
            "node": f.node,
            "kind": f.kind,
            "direction": f.direction,
            "throughput (GB/s)": f.bytes_per_second / 1e9,
        }
        for f in flows
    ]
)
st.caption(f"Rate of the collectors' byte counters over {duration(max(step, 300))} windows, every {duration(step)}.")
st.altair_chart(
    alt.Chart(throughput)
    .mark_line()
    .encode(
        x=charts.time_x("time (UTC)"),
        y=alt.Y("sum(throughput (GB/s)):Q", title="Throughput, all nodes (GB/s)"),
        color=alt.Color("direction:N", title="Direction"),
        row=alt.Row("kind:N", title=None),
    )
    .properties(height=140)
    .resolve_scale(y="independent"),
)
summary = (
    throughput.groupby(["node", "kind", "direction"])["throughput (GB/s)"]
    .agg(["mean", "max"])
    .reset_index()
    .rename(columns={"mean": "mean (GB/s)", "max": "peak (GB/s)"})
)
table(summary, "fabric-storage-throughput.csv")
