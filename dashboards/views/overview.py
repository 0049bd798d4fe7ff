"""Overview: spend, utilisation and unused allocated cost for the period (and the GPU-hours left out of it for want of a
price, and the prices behind it that rest on an estimate); the used cost by the two measures of useful work, kernel busy
and SM active; this month's spend against budgets and its forecast; the five biggest wasters (jobs and teams by unused
allocated cost); spend by day."""

from __future__ import annotations

from decimal import Decimal

import pandas as pd
import streamlit as st

from dashboards import activity, charts, data, filters
from dashboards.format import cents, headline, table
from dashboards.measures import UNUSED_COST, unused_cost_caption
from finops.analysis.report import NOT_MEASURED, fleet_summary
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
spend, idle, utilization = st.columns(3)
headline("GPU capacity cost", summary.capacity_cost, currency, place=spend)
headline(UNUSED_COST, summary.idle_cost, currency, place=idle)
utilization.metric("Utilisation of allocated GPUs", f"{summary.utilization:.1%}")
st.caption(f"{summary.allocated_share:.1%} of GPU-hours were held by a job.")
st.caption(unused_cost_caption(data.settings()))

st.subheader("Used (useful work), two measures")
overall = activity.total(rows)
kernel_busy, sm_active = st.columns(2)
headline(activity.KERNEL_BUSY_COST, summary.used_cost, currency, place=kernel_busy)
kernel_busy.caption(activity.kernel_busy_caption(summary.utilization))
if overall.sm_active_cost is None:  # measured GPU-hours that are all unpriced have no cost either
    measured = overall.activity_ratio("sm_active_ratio") is not None
    sm_active.metric(activity.SM_ACTIVE_COST, "unpriced" if measured else NOT_MEASURED)
else:
    headline(activity.SM_ACTIVE_COST, overall.sm_active_cost, currency, place=sm_active)
sm_active.caption(activity.sm_active_caption(overall, data.settings().efficiency_policy))
# The report's rows count unpriced GPU-seconds: the by-model query runs only when there are some.
unpriced = data.unpriced(url, view.start, view.end, view.scope) if any(r.unpriced_gpu_seconds for r in rows) else []
if unpriced:
    hours = sum(u.gpu_hours for u in unpriced)
    st.warning(
        f"The costs above leave out {hours:,.2f} GPU-hours whose GPU model has no price (counted, not costed): "
        + "; ".join(f"{u.model}: {u.gpu_hours:,.2f} GPU-hours, {u.fix}" for u in unpriced)
        + ". The Data quality page lists them."
    )
for estimate in data.price_estimates(url, view.start, view.end, view.scope):
    st.warning(f"The costs above rest on an estimated price: {estimate.note}.")

now = utc_now().replace(second=0, microsecond=0)
month = data.month(url, now, view.scope)
statuses = month.budgets
st.subheader(f"This month ({month.month:%B %Y}, to {now:%d %b %H:%M} UTC)")
team_budgets = [s for s in statuses if not s.project and s.comparable]
for problem in sorted({s.problem for s in statuses if s.problem}):
    st.warning(f"Left out of the budget totals: {problem}.")
month_currency = month.currency or currency
spent_column, forecast_column, budget_column, budgeted_column = st.columns(4)
headline("Spent this month", month.spent, month_currency, place=spent_column)
headline("Forecast month-end", month.forecast, month_currency, place=forecast_column)
if team_budgets:
    budget_total = sum((s.budget for s in team_budgets), Decimal(0))
    budgeted = sum((s.forecast for s in team_budgets), Decimal(0))
    headline("Budgets this month", budget_total, month_currency, place=budget_column)
    budget_column.caption(f"{len(team_budgets)} teams")
    headline(
        "Budgeted teams' forecast",
        budgeted,
        month_currency,
        place=budgeted_column,
        delta=budgeted - budget_total,
        delta_description="vs budgets",
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
                "budget": cents(s.budget),
                "spent": cents(s.spent),
                "used_percent": float(s.used_percent),
                "forecast": cents(s.forecast),
                "over_budget": s.comparable and s.forecast > s.budget,
            }
            for s in statuses
        ]
    )
    table(budget_frame, "budgets.csv", currency=statuses[0].currency)
else:
    st.write("No budgets set. `gpu-finops budget set TEAM AMOUNT` adds one.")

st.subheader(f"Top five wasters: {UNUSED_COST.lower()} in the period")
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
                    "idle_cost": cents(r.idle_cost),
                    "idle_gpu_hours": round(r.idle_gpu_seconds / 3600, 2),
                    "allocated_cost": cents(r.allocated_cost),
                }
                for r in job_rows
            ]
        )
        table(wasters, "top-idle-jobs.csv", currency=currency)
    else:
        st.write("No job left allocated GPU time unused in this period.")
with by_team:
    team_rows = data.wasters(url, view.start, view.end, "team", view.scope)
    if team_rows:
        team_wasters = pd.DataFrame(
            [
                {
                    "team": r.key,
                    "idle_cost": cents(r.idle_cost),
                    "idle_gpu_hours": round(r.idle_gpu_seconds / 3600, 2),
                    "allocated_cost": cents(r.allocated_cost),
                }
                for r in team_rows
            ]
        )
        table(team_wasters, "top-idle-teams.csv", currency=currency)
    else:
        st.write("No team left allocated GPU time unused in this period.")

st.subheader("Spend by day")
spend_chart, spend_table = data.spend_by_day(url, view.start, view.end, currency, view.scope)
charts.render(spend_chart)
table(spend_table, "spend-by-day.csv", currency=currency)
