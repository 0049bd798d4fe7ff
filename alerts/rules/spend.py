"""The budget and spend-anomaly rules: one candidate per budget threshold, budget forecast or spend anomaly event."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from alerts.rules.candidate import Candidate, money
from finops.analysis.events import BUDGET_FORECAST, BUDGET_THRESHOLD, SPEND_ANOMALY, EventView
from finops.timeutil import next_month_start


def event_candidates(events: Sequence[EventView]) -> list[Candidate]:
    """One candidate per budget threshold, budget forecast or spend anomaly event (others are skipped)."""
    found = []
    for event in events:
        payload = event.payload
        if event.kind in (BUDGET_THRESHOLD, BUDGET_FORECAST):
            found.append(_budget_candidate(event, payload))
        elif event.kind == SPEND_ANOMALY:
            found.append(_anomaly_candidate(event, payload))
    return found


def _budget_candidate(event: EventView, p: dict[str, Any]) -> Candidate:
    team, project, month, currency = str(p["team"]), str(p.get("project") or ""), str(p["month"]), str(p["currency"])
    month_start = datetime.strptime(f"{month}-01", "%Y-%m-%d").replace(tzinfo=UTC)
    scope = team + (f", project {project}" if project else "")
    who = f"team {scope}"
    spent, budget, forecast = money(p["spent"], currency), money(p["budget"], currency), money(p["forecast"], currency)
    if event.kind == BUDGET_THRESHOLD:
        threshold = int(p["threshold_percent"])
        rule = f"budget-{threshold}"
        title = f"Budget {threshold} % reached: {who}"
        summary = f"Team {scope} has spent {spent} of its {budget} budget for {month} ({p['used_percent']} %)."
    else:
        rule = "budget-forecast"
        title = f"Budget forecast above budget: {who}"
        summary = (
            f"At the current run rate {who} will spend {forecast} in {month}, above its {budget} budget "
            f"({p['used_percent']} % spent so far)."
        )
    fields = [
        ["Team", team],
        *([["Project", project]] if project else []),
        ["Month", month],
        ["Spent", spent],
        ["Budget", budget],
        ["Used", f"{p['used_percent']} %"],
        ["Forecast month-end", forecast],
    ]
    labels = {"team": team, "month": month, **({"project": project} if project else {})}
    return Candidate(
        rule=rule,
        labels=labels,
        annotations={"title": title, "name": who, "summary": summary, "fields": fields, "page": "teams"},
        figures=dict(p),
        starts_at=event.occurred_at,
        ends_at=next_month_start(month_start),
    )


def _anomaly_candidate(event: EventView, p: dict[str, Any]) -> Candidate:
    team, day, currency = str(p["team"]), str(p["day"]), str(p["currency"])
    spend, median = money(p["spend"], currency), money(p["baseline_median"], currency)
    z = p.get("z_score")
    summary = f"Team {team} spent {spend} on {day}, against a median of {median} a day over the 14 days before" + (
        f" (modified z-score {z})." if z is not None else " (a flat baseline)."
    )
    fields = [["Team", team], ["Day", day], ["Spend", spend], ["Baseline median", median]]
    if z is not None:
        fields.append(["Modified z-score", str(z)])
    return Candidate(
        rule="spend-anomaly",
        labels={"team": team, "day": day},
        annotations={
            "title": f"Spend anomaly: team {team} on {day}",
            "name": f"team {team} on {day}",
            "summary": summary,
            "fields": fields,
            "page": "teams",
        },
        figures=dict(p),
        starts_at=event.occurred_at,
        ends_at=datetime.combine(date.fromisoformat(day) + timedelta(days=2), datetime.min.time(), UTC),
    )
