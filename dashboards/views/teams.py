"""Teams: cost, use and waste per team for the period (the same numbers as ``gpu-finops report``), spend by day,
a team's budget burn-down over its month, and the cost by job and by user."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import altair as alt
import pandas as pd
import streamlit as st

from dashboards import charts, data, filters
from dashboards.format import PERCENT, cents, money, money_column, table
from finops.budgets import month_start, next_month_start
from finops.models import UNALLOCATED_TEAM
from finops.report import MONEY_FIELDS, ReportRow, report_dicts
from finops.timeutil import utc_now

st.title("Cost by team")
view = filters.sidebar()
url = data.database_url()
st.caption(view.describe())
rows = data.report(url, view.start, view.end, "team", **view.filters)
if not rows:
    st.info("No cost data in this period yet.")
    st.stop()
frame = pd.DataFrame(report_dicts(rows, "team"))
currency = rows[0].currency
chart_data = frame.assign(
    used=frame["used_cost"].astype(float),
    idle=frame["idle_cost"].astype(float),
    unallocated=frame.apply(lambda r: float(r["allocated_cost"]) if r["team"] == UNALLOCATED_TEAM else 0.0, axis=1),
).melt(id_vars="team", value_vars=["used", "idle", "unallocated"], var_name="kind", value_name="cost")
st.altair_chart(
    alt.Chart(chart_data)
    .mark_bar()
    .encode(
        x=alt.X("cost:Q", title=f"Cost ({currency})"),
        y=alt.Y("team:N", sort="-x", title="Team"),
        color=alt.Color("kind:N", title="Cost"),
    ),
    width="stretch",
)
for field in MONEY_FIELDS:
    frame[field] = frame[field].map(Decimal)  # the CSV is that of `gpu-finops report --by team --format csv`
table(
    frame,
    "cost-by-team.csv",
    column_config={
        "allocated_gpu_seconds": None,
        **{field: money_column(currency, f"{field.replace('_', ' ')} ({currency})") for field in MONEY_FIELDS},
    },
)

st.subheader("Spend by day")
days = data.daily(url, view.start, view.end, **view.filters)
st.altair_chart(charts.daily_spend_chart(days, currency, view.start, view.end), width="stretch")
table(charts.daily_frame(days, currency), "team-spend-by-day.csv", currency=currency)

st.subheader("Budget burn-down")
now = utc_now().replace(second=0, microsecond=0)
reference = min(view.end - timedelta(seconds=1), now)
if view.team is None:
    st.info("Choose a team in the sidebar to see its budget burn-down.")
else:
    first, following = month_start(reference), next_month_start(reference)
    at = min(now, following)
    statuses = data.month(url, at - timedelta(seconds=1) if at == following else at, team=view.team).budgets
    budget = next((s for s in statuses if not s.project), None)
    month_days = data.daily(url, first, at, team=view.team)
    spent = sum((d.allocated_cost for d in month_days), Decimal(0))
    points: list[dict[str, object]] = [{"time": first, "spend": 0.0, "line": "spent"}]
    running = Decimal(0)
    for day in month_days:
        running += day.allocated_cost
        points.append({"time": min(day.day + timedelta(days=1), at), "spend": float(running), "line": "spent"})
    budget_currency = budget.currency if budget else currency
    left, middle, right = st.columns(3)
    left.metric(f"Spent in {first:%B %Y}", money(spent, budget_currency))
    if budget is None:
        middle.metric("Budget", "none set")
        st.caption(f"`gpu-finops budget set {view.team} AMOUNT --month {first:%Y-%m}` sets one.")
    else:
        middle.metric("Budget", money(budget.budget, budget.currency), f"{budget.used_percent}% used", "off")
        right.metric(
            "Forecast month-end",
            money(budget.forecast, budget.currency),
            delta=f"{money(budget.forecast - budget.budget, budget.currency)} vs budget",
            delta_color="inverse",
        )
        points += [
            {"time": first, "spend": 0.0, "line": "even pace to the budget"},
            {"time": following, "spend": float(budget.budget), "line": "even pace to the budget"},
            {"time": at, "spend": float(budget.spent), "line": "forecast"},
            {"time": following, "spend": float(budget.forecast), "line": "forecast"},
        ]
    kinds = ["spent", "forecast", "even pace to the budget"]
    lines = (
        alt.Chart(pd.DataFrame(points))
        .mark_line(point=True)
        .encode(
            x=charts.time_x("time", "Time (UTC)", first, following),
            y=alt.Y("spend:Q", title=f"Cumulative spend ({budget_currency})"),
            color=alt.Color(
                "line:N",
                scale=alt.Scale(domain=kinds, range=["#1f77b4", "#1f77b4", "#7f7f7f"]),
                legend=alt.Legend(title=None, orient="bottom"),
            ),
            strokeDash=alt.StrokeDash(
                "line:N", legend=None, scale=alt.Scale(domain=kinds, range=[[1, 0], [6, 4], [2, 2]])
            ),
        )
    )
    layers: list[alt.Chart] = [lines]
    if budget is not None:
        rule = pd.DataFrame([{"budget": float(budget.budget)}])
        layers.append(
            alt.Chart(rule)
            .mark_rule(color="#d62728")
            .encode(y=alt.Y("budget:Q", title=f"Cumulative spend ({budget_currency})"))
        )
    st.altair_chart(alt.layer(*layers), width="stretch")
    cumulative = pd.DataFrame(
        [{"day (UTC)": d.day.date(), f"spend ({budget_currency})": cents(d.allocated_cost)} for d in month_days],
        columns=["day (UTC)", f"spend ({budget_currency})"],
    )
    cumulative[f"cumulative ({budget_currency})"] = cumulative[f"spend ({budget_currency})"].cumsum()
    table(cumulative, "budget-burn-down.csv", currency=budget_currency)
    if statuses:
        table(
            pd.DataFrame(
                [
                    {
                        "project": s.project or "(whole team)",
                        f"budget ({s.currency})": cents(s.budget),
                        f"spent ({s.currency})": cents(s.spent),
                        "used %": float(s.used_percent),
                        f"forecast month-end ({s.currency})": cents(s.forecast),
                    }
                    for s in statuses
                ]
            ),
            "team-budgets.csv",
            currency=statuses[0].currency,
            column_config={"used %": PERCENT},
        )
    if view.cluster or view.partition:
        st.caption(
            "Budgets are per team: the burn-down counts all of the team's spend, whatever the cluster or partition."
        )


def _breakdown(group_rows: list[ReportRow], key: str) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                key: r.key,
                **({"team": r.team} if key == "job" else {}),
                **({"user": r.user} if key == "job" else {}),
                "GPU-hours": round(r.allocated_gpu_seconds / 3600, 2),
                f"cost ({currency})": cents(r.allocated_cost),
                f"used ({currency})": cents(r.used_cost),
                f"idle ({currency})": cents(r.idle_cost),
            }
            for r in group_rows
            if r.key != UNALLOCATED_TEAM
        ]
    )


st.subheader("Breakdown by job and user")
if view.team is None:
    st.info("Choose a team in the sidebar to see its cost by job and by user (the Jobs page lists every job).")
    st.stop()
job_tab, user_tab = st.tabs(["By job", "By user"])
with job_tab:
    table(
        _breakdown(data.report(url, view.start, view.end, "job", **view.filters), "job"),
        "team-cost-by-job.csv",
        currency=currency,
    )
with user_tab:
    table(
        _breakdown(data.report(url, view.start, view.end, "user", **view.filters), "user"),
        "team-cost-by-user.csv",
        currency=currency,
    )
