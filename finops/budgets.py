"""Monthly budgets per team (optionally per project): month-to-date spend, share used, a run-rate forecast,
and the threshold events the alerts package consumes.

Thresholds: 50 %, 80 % and 100 % of the month's budget actually spent, and the forecast month-end spend above
the budget. Each is recorded once per team, project and month (:mod:`finops.events`), when first seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from finops.costmodel import quantize
from finops.events import BUDGET_FORECAST, BUDGET_THRESHOLD, record_event
from finops.models import Budget, Job, LedgerEntry, Team
from finops.teams import team_by_name, team_ids_by_name

RUN_RATE_WINDOW = timedelta(days=7)
THRESHOLDS_PERCENT = (50, 80, 100)


def month_start(at: datetime) -> datetime:
    """First instant (UTC) of the calendar month holding ``at``."""
    at = at.astimezone(UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def next_month_start(at: datetime) -> datetime:
    """First instant (UTC) of the month after the one holding ``at``."""
    start = month_start(at)
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def set_budget(
    session: Session, team: str, amount: Decimal, month: datetime, currency: str, project: str = ""
) -> Budget:
    """Set ``team``'s budget (or its ``project``'s) for the month holding ``month``, replacing any.
    ValueError if negative."""
    if amount < 0:
        raise ValueError(f"budget amount must be >= 0, got {amount}")
    team_id = team_by_name(session, team).id
    budget = session.get(Budget, (team_id, month_start(month), project))
    if budget is None:
        budget = Budget(
            team_id=team_id, month=month_start(month), project=project, amount=quantize(amount), currency=currency
        )
        session.add(budget)
    else:
        budget.amount, budget.currency = quantize(amount), currency
    session.flush()
    return budget


def delete_budget(session: Session, team: str, month: datetime, project: str = "") -> bool:
    """Remove ``team``'s (or its ``project``'s) budget for the month holding ``month``; False if there was none."""
    team_row = session.scalars(select(Team).where(Team.name == team)).one_or_none()
    budget = None if team_row is None else session.get(Budget, (team_row.id, month_start(month), project))
    if budget is None:
        return False
    session.delete(budget)
    session.flush()
    return True


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A team's month at a given instant: budget, spend so far, percent used, forecast month-end spend.

    Forecast = spend so far + (spend over the last 7 days ÷ the part of those 7 days the ledger covers)
    × time left in the month. Money is exact (6 decimals); ``used_percent`` has one decimal.
    """

    team: str
    project: str
    month: datetime
    budget: Decimal
    spent: Decimal
    used_percent: Decimal
    forecast: Decimal
    currency: str

    @property
    def used_ratio(self) -> float:
        """Spent ÷ budget (0 for a zero budget), for gauges."""
        return float(self.spent / self.budget) if self.budget else 0.0


def _spend(session: Session, team_id: int, project: str, start: datetime, end: datetime) -> Decimal:
    """The team's (or its project's jobs') allocated cost over ledger hours in [start, end)."""
    query = select(func.sum(LedgerEntry.allocated_cost)).where(
        LedgerEntry.team_id == team_id, LedgerEntry.hour >= start, LedgerEntry.hour < end
    )
    if project:
        query = query.join(Job, Job.id == LedgerEntry.job_pk).where(Job.project == project)
    total = session.scalar(query)
    return Decimal(0) if total is None else Decimal(total)


def budget_status(session: Session, at: datetime) -> list[BudgetStatus]:
    """Status of every budget set for the month holding ``at`` (UTC), by team name and project."""
    start, end = month_start(at), next_month_start(at)
    budgets = session.execute(
        select(Budget, Team.name)
        .join(Team, Team.id == Budget.team_id)
        .where(Budget.month == start)
        .order_by(Team.name, Budget.project)
    ).all()
    first = session.scalar(select(func.min(LedgerEntry.hour)).where(LedgerEntry.hour >= at - RUN_RATE_WINDOW))
    span = (at - first).total_seconds() if first is not None else 0
    statuses = []
    for budget, team in budgets:
        spent = _spend(session, budget.team_id, budget.project, start, at)
        recent = _spend(session, budget.team_id, budget.project, at - RUN_RATE_WINDOW, at)
        rate = recent / Decimal(span) if span > 0 else Decimal(0)
        forecast = quantize(spent + rate * Decimal((end - at).total_seconds()))
        percent = quantize(spent * 100 / budget.amount, Decimal("0.1")) if budget.amount else Decimal(0)
        statuses.append(
            BudgetStatus(team, budget.project, start, budget.amount, spent, percent, forecast, budget.currency)
        )
    return statuses


def record_budget_events(session: Session, at: datetime) -> int:
    """Record the threshold events of every budget for the month holding ``at``: one ``budget_threshold``
    event per threshold in :data:`THRESHOLDS_PERCENT` reached, one ``budget_forecast`` event when the forecast
    exceeds the budget; each once per team, project and month. Returns how many statuses were judged."""
    statuses = budget_status(session, at)
    team_ids = team_ids_by_name(session)
    for status in statuses:
        subject = f"{status.team}:{status.project}:{status.month:%Y-%m}"
        figures = {
            "team": status.team,
            "project": status.project,
            "month": f"{status.month:%Y-%m}",
            "budget": str(status.budget),
            "spent": str(status.spent),
            "used_percent": str(status.used_percent),
            "forecast": str(status.forecast),
            "currency": status.currency,
        }
        if not status.budget:
            continue
        for threshold in THRESHOLDS_PERCENT:
            if status.spent * 100 >= status.budget * threshold:
                payload = {**figures, "threshold_percent": threshold}
                record_event(
                    session, BUDGET_THRESHOLD, f"budget:{subject}:{threshold}", team_ids[status.team], at, payload
                )
        if status.forecast > status.budget:
            record_event(session, BUDGET_FORECAST, f"budget-forecast:{subject}", team_ids[status.team], at, figures)
    return len(statuses)
