"""Altair charts shared by the pages; every axis title names its unit.

The charts of the Overview and Teams pages are made once per query result and cached as Vega-Lite specs
(:func:`vega_lite`), which ``st.vega_lite_chart`` renders as ``st.altair_chart`` would have rendered the chart:
Altair validates a chart against the Vega-Lite schema whenever it is turned into a spec, which ``st.altair_chart``
does on every run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from finops.analysis.dashboard_queries import DailyCost
from finops.db.models import UNALLOCATED_TEAM
from finops.ledger.costmodel import CENT
from finops.savings.commitment_cost import CommitmentOutcome

LEGEND_LIMIT = 20
"""More series than this and the colour legend is left out (the table under the chart names them)."""

USED, UNUSED, UNALLOCATED = "Used", "Unused", "Unallocated"
COST_COLOURS: dict[str, str] = {USED: "#009E73", UNUSED: "#E69F00", UNALLOCATED: "#A0A0A0"}
"""The colour of each kind of cost, in every chart that shows it: used bluish green, unused (allocated, not used)
amber, capacity no job held grey (Okabe and Ito's colour-blind-safe palette; grey for "nobody's")."""
TEAM_COLOURS = ["#4C78A8", "#F58518", "#E45756", "#72B7B2", "#54A24B", "#EECA3B", "#B279A2", "#FF9DA6", "#9D755D"]
"""Colours of teams, in turn (Vega's ``tableau10`` without its grey, which is :data:`UNALLOCATED`'s)."""


def cost_colour(field: str) -> alt.Color:
    """Colour by ``field``, whose values are kinds of cost (keys of :data:`COST_COLOURS`), in their colours."""
    return alt.Color(
        f"{field}:N", title="Cost", scale=alt.Scale(domain=list(COST_COLOURS), range=list(COST_COLOURS.values()))
    )


def team_colour(field: str, teams: Sequence[str]) -> alt.Color:
    """Colour by ``field``, whose values are ``teams``: each team its colour of :data:`TEAM_COLOURS` (in turn, in
    sorted order), capacity no job held (``__unallocated__``) the grey of :data:`COST_COLOURS`."""
    domain = sorted(set(teams))
    held = [team for team in domain if team != UNALLOCATED_TEAM]
    colours = {team: TEAM_COLOURS[i % len(TEAM_COLOURS)] for i, team in enumerate(held)}
    colours[UNALLOCATED_TEAM] = COST_COLOURS[UNALLOCATED]
    return alt.Color(
        f"{field}:N",
        title="Team",
        scale=alt.Scale(domain=domain, range=[colours[team] for team in domain]),
        legend=legend(len(domain)),
    )


def time_x(field: str, title: str = "Time (UTC)", start: datetime | None = None, end: datetime | None = None) -> alt.X:
    """An x axis of UTC instants (shown in UTC whatever the viewer's time zone), over [start, end] when given."""
    domain = [start.isoformat(), end.isoformat()] if start is not None and end is not None else alt.Undefined
    return alt.X(f"{field}:T", title=title, scale=alt.Scale(type="utc", domain=domain))


def legend(series: int) -> alt.Legend | None:
    """A colour legend, or none beyond :data:`LEGEND_LIMIT` series."""
    return alt.Legend() if series <= LEGEND_LIMIT else None


def dataset(name: str, frame: pd.DataFrame) -> tuple[alt.NamedData, dict[str, pd.DataFrame]]:
    """``frame`` as a named dataset of a chart: the chart's data (``alt.Chart(data)``) and its entry for
    :func:`vega_lite`. The name ends with a digest of the rows, so that the spec changes with them (as the
    datasets ``st.altair_chart`` names after their content)."""
    digest = hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    full = f"{name}-{digest.hexdigest()[:16]}"
    return alt.NamedData(name=full), {full: frame}


def vega_lite(chart: alt.TopLevelMixin, datasets: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The Vega-Lite spec of ``chart`` (validated by Altair) whose data are the named ``datasets``
    (:func:`dataset`), for ``st.vega_lite_chart``: what ``st.altair_chart`` sends for the same chart, the
    datasets as Arrow tables and without the view size of Altair's default theme (Streamlit sizes the chart)."""
    spec = chart.to_dict()
    if getattr(chart, "config", alt.Undefined) is alt.Undefined:
        spec.pop("config", None)  # the theme's, not the chart's
    spec["datasets"] = dict(datasets)
    return spec


def render(spec: dict[str, Any]) -> None:
    """Draw a spec of :func:`vega_lite` across the page's width."""
    st.vega_lite_chart(spec=spec, width="stretch")


def daily_frame(days: Sequence[DailyCost]) -> pd.DataFrame:
    """One row per day and team: ``day`` (UTC), ``team``, ``allocated_cost``, ``used_cost``, ``idle_cost`` (money in
    cents, shown as :data:`dashboards.format.COLUMNS` names them)."""
    columns = ["day", "team", "allocated_cost", "used_cost", "idle_cost"]
    return pd.DataFrame(
        [
            [
                d.day.date(),
                d.team,
                d.allocated_cost.quantize(CENT),
                d.used_cost.quantize(CENT),
                d.idle_cost.quantize(CENT),
            ]
            for d in days
        ],
        columns=columns,
    )


def daily_spend_spec(days: Sequence[DailyCost], currency: str, start: datetime, end: datetime) -> dict[str, Any]:
    """Stacked bars: spend per UTC day over the days of the period [start, end), one colour per team (a
    :func:`vega_lite` spec)."""
    frame = pd.DataFrame(
        [
            {"day": d.day, "end": d.day + timedelta(days=1), "team": d.team, "cost": float(d.allocated_cost)}
            for d in days
        ],
        columns=["day", "end", "team", "cost"],
    )
    first = start.replace(hour=0, minute=0, second=0, microsecond=0)
    last = (end - timedelta(seconds=1)).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    data, datasets = dataset("days", frame)
    chart = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=time_x("day", "Day (UTC)", first, last),
            x2="end:T",
            y=alt.Y("sum(cost):Q", title=f"Spend ({currency})", stack="zero"),
            color=team_colour("team", frame["team"].tolist()),
            tooltip=[
                alt.Tooltip("utcyearmonthdate(day):T", title="Day (UTC)"),
                alt.Tooltip("team:N", title="Team"),
                alt.Tooltip("sum(cost):Q", title=f"Spend ({currency})", format=",.2f"),
            ],
        )
    )
    return vega_lite(chart, datasets)


def team_cost_spec(frame: pd.DataFrame, currency: str) -> dict[str, Any]:
    """Stacked bars per team of a cost report by team (:func:`finops.analysis.report_format.report_dicts`): used,
    unused and (for capacity no job held) unallocated cost in :data:`COST_COLOURS`, most expensive team on top (a
    :func:`vega_lite` spec)."""
    costs = frame.assign(
        **{
            USED: frame["used_cost"].astype(float),
            UNUSED: frame["idle_cost"].astype(float),
            UNALLOCATED: frame["allocated_cost"].astype(float).where(frame["team"] == UNALLOCATED_TEAM, 0.0),
        }
    ).melt(id_vars="team", value_vars=list(COST_COLOURS), var_name="kind", value_name="cost")
    costs["order"] = costs["kind"].map(list(COST_COLOURS).index)
    data, datasets = dataset("teams", costs)
    chart = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("sum(cost):Q", title=f"Cost ({currency})"),
            y=alt.Y("team:N", sort="-x", title="Team"),
            color=cost_colour("kind"),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("team:N", title="Team"),
                alt.Tooltip("kind:N", title="Cost"),
                alt.Tooltip("sum(cost):Q", title=f"Cost ({currency})", format=",.2f"),
            ],
        )
    )
    return vega_lite(chart, datasets)


BURN_DOWN_LINES = ["spent", "forecast", "even pace to the budget"]


def burn_down_spec(
    points: Sequence[tuple[datetime, float, str]],
    first: datetime,
    following: datetime,
    budget: float | None,
    currency: str,
) -> dict[str, Any]:
    """A team's cumulative spend over its month [first, following): lines through ``points`` (time, cumulative
    spend, line: one of :data:`BURN_DOWN_LINES`), solid for what was spent, dashed for the forecast and
    dotted for an even pace to the budget, and a red rule at ``budget`` when there is one (a :func:`vega_lite`
    spec)."""
    title = f"Cumulative spend ({currency})"
    data, datasets = dataset("spend", pd.DataFrame(list(points), columns=["time", "spend", "line"]))
    lines = (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=time_x("time", "Time (UTC)", first, following),
            y=alt.Y("spend:Q", title=title),
            color=alt.Color(
                "line:N",
                scale=alt.Scale(domain=BURN_DOWN_LINES, range=["#1f77b4", "#1f77b4", "#7f7f7f"]),
                legend=alt.Legend(title=None, orient="bottom"),
            ),
            strokeDash=alt.StrokeDash(
                "line:N", legend=None, scale=alt.Scale(domain=BURN_DOWN_LINES, range=[[1, 0], [6, 4], [2, 2]])
            ),
        )
    )
    layers: list[alt.Chart] = [lines]
    if budget is not None:
        rule, rule_datasets = dataset("budget", pd.DataFrame([{"budget": budget}]))
        datasets |= rule_datasets
        layers.append(alt.Chart(rule).mark_rule(color="#d62728").encode(y=alt.Y("budget:Q", title=title)))
    return vega_lite(alt.layer(*layers), datasets)


def reason_cost_spec(frame: pd.DataFrame, currency: str) -> dict[str, Any]:
    """Horizontal bars: the idle cost of each waste reason (``reason``, its title; in the order the frame first names
    them), stacked by ``team`` in its colour (:func:`team_colour`), of the Savings page's rows
    (:func:`dashboards.data.reason_costs`; a ``reason_cost`` of None, unpriced, draws nothing)."""
    costs = pd.DataFrame(
        {
            "team": frame["team"],
            "reason": frame["reason"],
            "cost": [0.0 if cost is None or pd.isna(cost) else float(cost) for cost in frame["reason_cost"]],
        }
    )
    data, datasets = dataset("reasons", costs)
    title = f"Idle cost ({currency})"
    chart = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("sum(cost):Q", title=title),
            y=alt.Y("reason:N", sort=list(dict.fromkeys(costs["reason"])), title="Probable reason"),
            color=team_colour("team", costs["team"].tolist()),
            tooltip=[
                alt.Tooltip("reason:N", title="Probable reason"),
                alt.Tooltip("team:N", title="Team"),
                alt.Tooltip("sum(cost):Q", title=title, format=",.2f"),
            ],
        )
    )
    return vega_lite(chart, datasets)


OPTIMUM_COLOUR = "#D55E00"
"""The marked least-cost point of a commitment curve (Okabe and Ito's vermilion)."""


def commitment_curve_spec(
    curve: Sequence[tuple[int, Decimal]], best: CommitmentOutcome, currency: str
) -> dict[str, Any]:
    """A commitment's cost over its window against the committed quantity (``curve``: ``(GPUs, cost)`` from 0 to the
    peak, :meth:`finops.savings.commitments.ModelCommitment.curve`), a line through every whole quantity, with the
    quantity that costs least (``best``) marked by a larger point in :data:`OPTIMUM_COLOUR` and labelled on the side
    of the plot's middle (a :func:`vega_lite` spec)."""
    title = f"Cost over the window ({currency})"
    points = pd.DataFrame([{"gpus": quantity, "cost": float(cost)} for quantity, cost in curve])
    line_data, datasets = dataset("curve", points)
    quantity_axis = alt.X("gpus:Q", title="Committed quantity (GPUs)", axis=alt.Axis(tickMinStep=1, format="d"))
    tooltip = [
        alt.Tooltip("gpus:Q", title="Committed GPUs", format=",d"),
        alt.Tooltip("cost:Q", title=title, format=",.2f"),
    ]
    line = (
        alt.Chart(line_data)
        .mark_line(point=len(points) <= 100)
        .encode(x=quantity_axis, y=alt.Y("cost:Q", title=title), tooltip=tooltip)
    )
    label_text = f"least cost: {best.quantity} GPUs"
    lowest = pd.DataFrame([{"gpus": best.quantity, "cost": float(best.cost), "label": label_text}])
    best_data, best_datasets = dataset("optimum", lowest)
    datasets |= best_datasets
    marked = alt.Chart(best_data).encode(x=quantity_axis, y=alt.Y("cost:Q", title=title), tooltip=tooltip)
    point = marked.mark_point(filled=True, size=140, color=OPTIMUM_COLOUR)
    leftward = best.quantity > len(points) / 2  # the label stays inside the plot on the curve's right half
    label = marked.mark_text(
        align="right" if leftward else "left",
        dx=-10 if leftward else 10,
        dy=-10,
        color=OPTIMUM_COLOUR,
        fontWeight="bold",
    )
    label = label.encode(text="label:N")
    return vega_lite(alt.layer(line, point, label), datasets)


ACTIVITY_BAND_FILLS = {"effective": COST_COLOURS[USED], "moderate": "#FFFFFF", "ineffective": COST_COLOURS[UNUSED]}
"""The background of each band of SM activity in :func:`activity_scatter_spec`: effective in the colour of used
cost, likely ineffective in that of unused cost, moderate none."""


ACTIVITY_CHART_HEIGHT = 460
"""The height of :func:`activity_scatter_spec` in pixels: square-ish at the page's width, and its legends fit."""


def activity_scatter_spec(points: pd.DataFrame, currency: str, effective: float, ineffective: float) -> dict[str, Any]:
    """Utilisation against SM activity, one point per job (``points``: ``job``, ``team``, ``user``,
    ``utilisation (%)``, ``SM activity (%)``, ``cost``, the allocated cost in ``currency``): x utilisation, y SM
    activity, both 0-100 %, the point's area its cost and its colour its team (:func:`team_colour`). Behind them
    the bands of SM activity, effective at or above ``effective`` (0..1), likely ineffective below
    ``ineffective``, moderate between (:data:`ACTIVITY_BAND_FILLS`), and the diagonal where SM activity equals
    utilisation: a job far below it ran kernels on few of its SMs. A :func:`vega_lite` spec."""
    x_title, y_title = "Utilisation (%)", "SM activity (%)"
    scale = alt.Scale(domain=[0, 100], nice=False)
    top, bottom = effective * 100, ineffective * 100
    bands = pd.DataFrame(
        [
            (f"effective (≥ {top:g} %)", top, 100.0, ACTIVITY_BAND_FILLS["effective"]),
            ("moderate", bottom, top, ACTIVITY_BAND_FILLS["moderate"]),
            (f"ineffective (< {bottom:g} %)", 0.0, bottom, ACTIVITY_BAND_FILLS["ineffective"]),
        ],
        columns=["band", "from", "to", "fill"],
    ).assign(left=0.0, right=100.0)
    band_data, datasets = dataset("bands", bands)
    diagonal_data, diagonal_datasets = dataset("diagonal", pd.DataFrame({"x": [0.0, 100.0], "y": [0.0, 100.0]}))
    point_data, point_datasets = dataset("jobs", points)
    datasets |= diagonal_datasets | point_datasets
    y_band = alt.Y("from:Q", title=y_title, scale=scale)
    background = (
        alt.Chart(band_data).mark_rect(opacity=0.15).encode(y=y_band, y2="to:Q", fill=alt.Fill("fill:N", scale=None))
    )
    labels = (
        alt.Chart(band_data)
        .mark_text(align="left", baseline="top", dx=4, dy=4, color="#555555")
        .encode(x=alt.value(0), y=alt.Y("to:Q", title=y_title, scale=scale), text="band:N")
    )
    diagonal = (
        alt.Chart(diagonal_data)
        .mark_line(color="#7f7f7f", strokeDash=[4, 4])
        .encode(x=alt.X("x:Q", title=x_title, scale=scale), y=alt.Y("y:Q", title=y_title, scale=scale))
    )
    cost_title = f"Allocated cost ({currency})"
    jobs = (
        alt.Chart(point_data)
        .mark_circle(opacity=0.7)
        .encode(
            x=alt.X("utilisation (%):Q", title=x_title, scale=scale),
            y=alt.Y("SM activity (%):Q", title=y_title, scale=scale),
            size=alt.Size("cost:Q", title=cost_title, scale=alt.Scale(range=[12, 700]), legend=alt.Legend(tickCount=3)),
            color=team_colour("team", points["team"].tolist()),
            tooltip=[
                alt.Tooltip("job:N", title="Job"),
                alt.Tooltip("team:N", title="Team"),
                alt.Tooltip("user:N", title="User"),
                alt.Tooltip("utilisation (%):Q", title=x_title, format=",.1f"),
                alt.Tooltip("SM activity (%):Q", title=y_title, format=",.1f"),
                alt.Tooltip("cost:Q", title=cost_title, format=",.2f"),
            ],
        )
    )
    return vega_lite(alt.layer(background, labels, diagonal, jobs).properties(height=ACTIVITY_CHART_HEIGHT), datasets)
