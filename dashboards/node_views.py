"""What the GPUs & nodes page draws from the per-node readings (:func:`finops.analysis.telemetry.node_buckets`):
the heatmap of utilisation, board power, hottest GPU and the clocks-event (throttle) reasons, as tables and
Vega-Lite specs (:func:`dashboards.charts.vega_lite`), made once per query result (:func:`dashboards.data.nodes_page`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import altair as alt
import pandas as pd

from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from dashboards import charts
from dashboards.format import Column
from finops.analysis.telemetry import NodeBucket


def reason_label(reason: str) -> str:
    """A clocks-event reason's NVML name as people read it: ``sw_power_cap`` is ``SW power cap``."""
    words = [word.upper() if word in ("gpu", "sw", "hw") else word for word in reason.split("_")]
    return " ".join(words)[:1].upper() + " ".join(words)[1:]


REASON_COLUMNS: dict[str, Column] = {
    **{
        f"{reason} (readings)": Column(f"{reason_label(reason)} (readings)", "count") for reason in CLOCKS_EVENT_REASONS
    },
    **{
        f"{reason} (%)": Column(f"{reason_label(reason)} (% of readings)", "percent") for reason in CLOCKS_EVENT_REASONS
    },
}
"""How the tables of :class:`NodeViews` show their per-reason columns (``<reason> (readings)``, ``<reason> (%)``,
by NVML name), for :func:`dashboards.format.table`."""


@dataclass(frozen=True, slots=True)
class NodeViews:
    """The page's charts (Vega-Lite specs) and tables for one period, bucket width and filters; ``nodes`` is how
    many nodes have readings (no readings: empty tables and specs)."""

    nodes: int
    heatmap: dict[str, Any]
    power: dict[str, Any]
    temperature: dict[str, Any]
    reasons: dict[str, Any]
    reasons_by_node: pd.DataFrame
    cells: pd.DataFrame


def node_views(buckets: Sequence[NodeBucket], width: int, start: datetime, end: datetime) -> NodeViews:
    """:class:`NodeViews` of ``buckets`` (of ``width`` seconds) over [start, end)."""
    if not buckets:
        return NodeViews(0, {}, {}, {}, {}, pd.DataFrame(), pd.DataFrame())
    node_count = len({b.node for b in buckets})
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
    data, datasets = charts.dataset("cells", cells)
    heatmap = (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=charts.time_x("from (UTC)", start=start, end=end),
            x2="to (UTC):T",
            y=alt.Y("node:N", title="Node", sort="ascending"),
            color=alt.Color(
                "utilisation (%):Q", title="Utilisation (%)", scale=alt.Scale(domain=[0, 100], scheme="viridis")
            ),
            tooltip=["node:N", "from (UTC):T", "utilisation (%):Q", "power (W):Q", "hottest GPU (°C):Q"],
        )
        .properties(height=max(160, min(12 * node_count, 1200)))
    )
    legend = charts.legend(node_count)
    power_data, power_datasets = charts.dataset("power", cells.assign(**{"power (kW)": cells["power (W)"] / 1000}))
    power = (
        alt.Chart(power_data)
        .mark_bar()
        .encode(
            x=charts.time_x("from (UTC)", start=start, end=end),
            x2="to (UTC):T",
            y=alt.Y("sum(power (kW)):Q", title="Board power, all GPUs (kW)", stack="zero"),
            color=alt.Color("node:N", title="Node", legend=legend),
            tooltip=["node:N", "from (UTC):T", "power (kW):Q"],
        )
    )
    temperature = (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=charts.time_x("from (UTC)", start=start, end=end),
            y=alt.Y("hottest GPU (°C):Q", title="Hottest GPU of the node (°C)"),
            color=alt.Color("node:N", title="Node", legend=legend),
            tooltip=["node:N", "from (UTC):T", "hottest GPU (°C):Q"],
        )
    )

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
    fleet_data, fleet_datasets = charts.dataset("reasons", fleet)
    reason_chart = (
        alt.Chart(fleet_data)
        .mark_bar()
        .encode(
            x=alt.X("readings with it active (%):Q", title="Readings with the reason active (%)"),
            y=alt.Y("reason:N", title="Reason (NVML clocks_event_reasons)", sort="-x"),
        )
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
    return NodeViews(
        nodes=node_count,
        heatmap=charts.vega_lite(heatmap, datasets),
        power=charts.vega_lite(power, power_datasets),
        temperature=charts.vega_lite(temperature, datasets),
        reasons=charts.vega_lite(reason_chart, fleet_datasets),
        reasons_by_node=per_node,
        cells=cells,
    )
