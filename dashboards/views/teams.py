"""Teams: cost, use and unused allocated cost per team for the period (the same numbers as ``gpu-finops report``),
their hardware activity (SM, tensor and DRAM activity, the SM-active cost and the profiled share), spend by day, a
team's budget burn-down over its month, and the cost by job and by user."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pandas as pd
import streamlit as st

from dashboards import activity, charts, data, filters
from dashboards.format import cents, headline, table
from dashboards.measures import unused_cost_caption
from finops.analysis.filters import Scope
from finops.analysis.report import NOT_MEASURED
from finops.timeutil import month_start, next_month_start, utc_now

st.title("Cost by team")
view = filters.sidebar()
url = data.database_url()
st.caption(view.describe())
rows = data.report(url, view.start, view.end, "team", view.scope)
if not rows:
    st.info("No cost data in this period yet.")
    st.stop()
currency = rows[0].currency
cost_chart, frame = data.team_costs(url, view.start, view.end, view.scope)
charts.render(cost_chart)
st.caption(unused_cost_caption(data.settings()))
table(frame, "cost-by-team.csv", currency=currency)

st.subheader("Hardware activity")
activity_frame = data.team_activity(url, view.start, view.end, view.scope)
st.caption(activity.table_caption(data.settings().efficiency_policy))
table(activity_frame, "activity-by-team.csv", currency=currency, placeholder=NOT_MEASURED)

st.subheader("Spend by day")
spend_chart, spend_table = data.spend_by_day(url, view.start, view.end, currency, view.scope)
charts.render(spend_chart)
table(spend_table, "team-spend-by-day.csv", currency=currency)

st.subheader("Budget burn-down")
now = utc_now().replace(second=0, microsecond=0)
reference = min(view.end - timedelta(seconds=1), now)
if view.team is None:
    st.info("Choose a team in the sidebar to see its budget burn-down.")
else:
    first, following = month_start(reference), next_month_start(reference)
    at = min(now, following)
    team_only = Scope(team=view.team)
    statuses = data.month(url, at - timedelta(seconds=1) if at == following else at, team_only).budgets
    budget = next((s for s in statuses if not s.project), None)
    if budget is not None and budget.problem:
        st.warning(f"This team's budget is left out: {budget.problem}.")
        budget = None
    # The ledger hours that start before `at` are those before the next whole hour: read up to that hour, the
    # month to date is the cube of the period when the period is the month to date.
    whole_hour = at.replace(minute=0, second=0, microsecond=0)
    month_days = data.daily(url, first, whole_hour + timedelta(hours=1) if at > whole_hour else at, team_only)
    spent = sum((d.allocated_cost for d in month_days), Decimal(0))
    points = [(first, 0.0, "spent")]
    running = Decimal(0)
    for day in month_days:
        running += day.allocated_cost
        points.append((min(day.day + timedelta(days=1), at), float(running), "spent"))
    budget_currency = budget.currency if budget else currency
    left, middle, right = st.columns(3)
    headline(f"Spent in {first:%B %Y}", spent, budget_currency, place=left)
    if budget is None:
        middle.metric("Budget", "none set")
        st.caption(f"`gpu-finops budget set {view.team} AMOUNT --month {first:%Y-%m}` sets one.")
    else:
        headline("Budget", budget.budget, budget.currency, place=middle)
        middle.caption(f"{budget.used_percent}% used")
        headline(
            "Forecast month-end",
            budget.forecast,
            budget.currency,
            place=right,
            delta=budget.forecast - budget.budget,
            delta_description="vs budget",
            delta_color="inverse",
        )
        points += [
            (first, 0.0, "even pace to the budget"),
            (following, float(budget.budget), "even pace to the budget"),
            (at, float(budget.spent), "forecast"),
            (following, float(budget.forecast), "forecast"),
        ]
    charts.render(
        data.burn_down_spec(
            tuple(points), first, following, None if budget is None else float(budget.budget), budget_currency
        )
    )
    cumulative = pd.DataFrame(
        [{"day": d.day.date(), "spend": cents(d.allocated_cost)} for d in month_days], columns=["day", "spend"]
    )
    cumulative["cumulative_spend"] = cumulative["spend"].cumsum()
    table(cumulative, "budget-burn-down.csv", currency=budget_currency)
    if statuses:
        table(
            pd.DataFrame(
                [
                    {
                        "project": s.project or "(whole team)",
                        "budget": cents(s.budget),
                        "spent": cents(s.spent),
                        "used_percent": float(s.used_percent),
                        "forecast": cents(s.forecast),
                    }
                    for s in statuses
                ]
            ),
            "team-budgets.csv",
            currency=statuses[0].currency,
        )
    if view.cluster or view.partition:
        st.caption(
            "Budgets are per team: the burn-down counts all of the team's spend, whatever the cluster or partition."
        )


st.subheader("Breakdown by job and user")
if view.team is None:
    st.info("Choose a team in the sidebar to see its cost by job and by user (the Jobs page lists every job).")
    st.stop()
job_tab, user_tab = st.tabs(["By job", "By user"])
with job_tab:
    table(
        data.breakdown(url, view.start, view.end, "job", view.scope),
        "team-cost-by-job.csv",
        currency=currency,
    )
with user_tab:
    table(
        data.breakdown(url, view.start, view.end, "user", view.scope),
        "team-cost-by-user.csv",
        currency=currency,
    )
