"""GPUs & nodes: utilisation per node and hour (heatmap), board power, temperature and clocks-event (throttle)
reasons from the GPU readings; InfiniBand and storage throughput from the collectors' counters in Prometheus."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import charts, data, filters
from dashboards.format import duration, table
from finops.dashboard_queries import bucket_seconds
from finops.prometheus_pull import PrometheusError
from finops.timeutil import utc_now

MAX_COLUMNS = 240  # time buckets across the heatmap at most: hourly up to 10 days, wider beyond

st.title("GPUs & nodes")
view = filters.sidebar(team=False, default_period="24h")
url = data.database_url()
st.caption(view.describe())
end = min(view.end, utc_now().replace(second=0, microsecond=0) + timedelta(minutes=1))
width = bucket_seconds(view.start, view.end, MAX_COLUMNS, minimum=3600)
buckets = data.node_telemetry(url, view.start, view.end, width, view.scope)
node_count = len({b.node for b in buckets})

st.subheader("Utilisation by node")
if not buckets:
    st.info("No GPU readings in this period (raw readings are kept for `FINOPS_SAMPLE_RETENTION_DAYS`).")
else:
    st.caption(
        f"Mean GPU utilisation of each node over {duration(width)}, {node_count} node{'s' if node_count != 1 else ''}."
    )
    cells = pd.DataFrame(
        [
            {
                "node": b.node,
                "from (UTC)": b.ts,
                "to (UTC)": b.ts + timedelta(seconds=width),
                "GPUs": b.gpus,
                "utilisation (%)": None if b.utilization is None else round(b.utilization * 100, 1),
                "power (W)": None if b.power_watts is None else round(b.power_watts, 1),
                "hottest GPU (°C)": b.max_temperature_celsius,
                "readings": b.readings,
                **{f"{reason} (readings)": count for reason, count in b.reason_readings.items()},
            }
            for b in buckets
        ]
    )
    heatmap = (
        alt.Chart(cells)
        .mark_rect()
        .encode(
            x=charts.time_x("from (UTC)", start=view.start, end=view.end),
            x2="to (UTC):T",
            y=alt.Y("node:N", title="Node", sort="ascending"),
            color=alt.Color(
                "utilisation (%):Q", title="Utilisation (%)", scale=alt.Scale(domain=[0, 100], scheme="viridis")
            ),
            tooltip=["node:N", "from (UTC):T", "utilisation (%):Q", "power (W):Q", "hottest GPU (°C):Q"],
        )
        .properties(height=max(160, min(12 * node_count, 1200)))
    )
    st.altair_chart(heatmap, width="stretch")

    legend = charts.legend(node_count)
    power_frame = cells.assign(**{"power (kW)": cells["power (W)"] / 1000})
    st.subheader("Power and temperature")
    st.altair_chart(
        alt.Chart(power_frame)
        .mark_bar()
        .encode(
            x=charts.time_x("from (UTC)", start=view.start, end=view.end),
            x2="to (UTC):T",
            y=alt.Y("sum(power (kW)):Q", title="Board power, all GPUs (kW)", stack="zero"),
            color=alt.Color("node:N", title="Node", legend=legend),
            tooltip=["node:N", "from (UTC):T", "power (kW):Q"],
        ),
        width="stretch",
    )
    st.altair_chart(
        alt.Chart(cells)
        .mark_line(point=True)
        .encode(
            x=charts.time_x("from (UTC)", start=view.start, end=view.end),
            y=alt.Y("hottest GPU (°C):Q", title="Hottest GPU of the node (°C)"),
            color=alt.Color("node:N", title="Node", legend=legend),
            tooltip=["node:N", "from (UTC):T", "hottest GPU (°C):Q"],
        ),
        width="stretch",
    )

    st.subheader("Clocks-event (throttle) reasons")
    readings: dict[str, int] = defaultdict(int)
    active: dict[tuple[str, str], int] = defaultdict(int)
    for b in buckets:
        readings[b.node] += b.readings
        for reason, count in b.reason_readings.items():
            active[(b.node, reason)] += count
    reasons = list(buckets[0].reason_readings)
    total_readings = sum(readings.values())
    fleet = pd.DataFrame(
        [
            {
                "reason": reason,
                "readings with it active (%)": round(
                    100 * sum(active[(node, reason)] for node in readings) / total_readings, 2
                ),
            }
            for reason in reasons
        ]
    )
    st.altair_chart(
        alt.Chart(fleet)
        .mark_bar()
        .encode(
            x=alt.X("readings with it active (%):Q", title="Readings with the reason active (%)"),
            y=alt.Y("reason:N", title="Reason (NVML clocks_event_reasons)", sort="-x"),
        ),
        width="stretch",
    )
    per_node = pd.DataFrame(
        [
            {
                "node": node,
                "readings": count,
                **{
                    f"{reason} (%)": round(100 * active[(node, reason)] / count, 2) if count else None
                    for reason in reasons
                },
            }
            for node, count in sorted(readings.items())
        ]
    )
    table(per_node, "throttle-reasons-by-node.csv")
    st.caption("Share of each node's readings with the reason's bit set in the GPU's clocks-event reasons bitmask.")
    with st.expander("Per node and time bucket (the heatmap's data)"):
        table(cells, "gpu-nodes-by-time.csv")

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
