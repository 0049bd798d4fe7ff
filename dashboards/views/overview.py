"""Overview: spend, utilisation and idle cost for the period (and the GPU-hours left out of it for want of a
price); this month's spend against budgets and its forecast; the five biggest wasters (jobs and teams by idle
cost); spend by day."""

from __future__ import annotations

from decimal import Decimal

import pandas as pd
import streamlit as st

from dashboards import charts, data, filters
from dashboards.format import PERCENT, cents, money, table
from finops.analysis.report import fleet_summary
from finops.timeutil import utc_now

st.title("GPU spend overview")
view = filters.sidebar()
url = data.database_url()
st.caption(view.describe())
rows = data.report(url, view.start, view.end, "team", view.scope)
if not rows:
    st.info("No cost data in this period yet. Run the collectors and `gpu-finops rollup`, or `gpu-finops demo`.")
    st.stop()
summary = fleet_summary(rows)
currency = summary.currency
spend, used, idle, utilization = st.columns(4)
spend.metric("GPU capacity cost", money(summary.capacity_cost, currency))
used.metric("Used (useful work)", money(summary.used_cost, currency))
idle.metric("Idle cost (waste)", money(summary.idle_cost, currency))
utilization.metric("Utilisation of allocated GPUs", f"{summary.utilization:.1%}")
st.caption(f"{summary.allocated_share:.1%} of GPU-hours were held by a job.")
# The report's rows count unpriced GPU-seconds: the by-model query runs only when there are some.
unpriced = data.unpriced(url, view.start, view.end, view.scope) if any(r.unpriced_gpu_seconds for r in rows) else []
if unpriced:
    hours = sum(u.gpu_hours for u in unpriced)
    st.warning(
        f"The costs above leave out {hours:,.2f} GPU-hours whose GPU model has no price (counted, not costed): "
        + "; ".join(f"{u.model}: {u.gpu_hours:,.2f} GPU-hours, {u.fix}" for u in unpriced)
        + ". The Data quality page lists them."
    )

now = utc_now().replace(second=0, microsecond=0)
month = data.month(url, now, view.scope)
statuses = month.budgets
st.subheader(f"This month ({month.month:%B %Y}, to {now:%d %b %H:%M} UTC)")
team_budgets = [s for s in statuses if not s.project]
month_currency = month.currency or currency
spent_column, forecast_column, budget_column, budgeted_column = st.columns(4)
spent_column.metric("Spent this month", money(month.spent, month_currency))
forecast_column.metric("Forecast month-end", money(month.forecast, month_currency))
if team_budgets:
    budget_total = sum((s.budget for s in team_budgets), Decimal(0))
    budgeted = sum((s.forecast for s in team_budgets), Decimal(0))
    budget_column.metric("Budgets this month", money(budget_total, month_currency), f"{len(team_budgets)} teams", "off")
    budgeted_column.metric(
        "Budgeted teams' forecast",
        money(budgeted, month_currency),
        delta=f"{money(budgeted - budget_total, month_currency)} vs their budgets",
        delta_color="inverse",
    )
else:
    budget_column.metric("Budgets this month", "none set")
if view.cluster or view.partition:
    st.caption("Budgets are per team (or project): the cluster and partition filters do not narrow them.")
if statuses:
    budget_frame = pd.DataFrame(
        [
            {
                "team": s.team,
                "project": s.project or "(whole team)",
                f"budget ({s.currency})": cents(s.budget),
                f"spent ({s.currency})": cents(s.spent),
                "used %": float(s.used_percent),
                f"forecast month-end ({s.currency})": cents(s.forecast),
                "forecast over budget": s.forecast > s.budget,
            }
            for s in statuses
        ]
    )
    table(budget_frame, "budgets.csv", currency=statuses[0].currency, column_config={"used %": PERCENT})
else:
    st.write("No budgets set. `gpu-finops budget set TEAM AMOUNT` adds one.")

st.subheader("Top five wasters: idle cost in the period")
by_job, by_team = st.tabs(["Jobs", "Teams"])
with by_job:
    job_rows = data.wasters(url, view.start, view.end, "job", view.scope)
    if job_rows:
        wasters = pd.DataFrame(
            [
                {
                    "job": r.key,
                    "team": r.team,
                    "user": r.user,
                    f"idle cost ({currency})": cents(r.idle_cost),
                    "idle GPU-hours": round(r.idle_gpu_seconds / 3600, 2),
                    f"cost ({currency})": cents(r.allocated_cost),
                }
                for r in job_rows
            ]
        )
        table(wasters, "top-idle-jobs.csv", currency=currency)
    else:
        st.write("No job sat idle in this period.")
with by_team:
    team_rows = data.wasters(url, view.start, view.end, "team", view.scope)
    if team_rows:
        team_wasters = pd.DataFrame(
            [
                {
                    "team": r.key,
                    f"idle cost ({currency})": cents(r.idle_cost),
                    "idle GPU-hours": round(r.idle_gpu_seconds / 3600, 2),
                    f"cost ({currency})": cents(r.allocated_cost),
                }
                for r in team_rows
            ]
        )
        table(team_wasters, "top-idle-teams.csv", currency=currency)
    else:
        st.write("No team sat idle in this period.")

st.subheader("Spend by day")
spend_chart, spend_table = data.spend_by_day(url, view.start, view.end, currency, view.scope)
charts.render(spend_chart)
table(spend_table, "spend-by-day.csv", currency=currency)
