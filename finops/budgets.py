"""Monthly team budgets: month-to-date spend, share of budget used and a run-rate forecast."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from finops.costmodel import quantize
from finops.models import Budget, LedgerEntry, Team
from finops.teams import team_by_name

RUN_RATE_WINDOW = timedelta(days=7)


def month_start(at: datetime) -> datetime:
    """First instant (UTC) of the calendar month holding ``at``."""
    at = at.astimezone(UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def next_month_start(at: datetime) -> datetime:
    """First instant (UTC) of the month after the one holding ``at``."""
    start = month_start(at)
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def set_budget(session: Session, team: str, amount: Decimal, month: datetime, currency: str) -> Budget:
    """Set ``team``'s budget for the month holding ``month`` (replacing any). ValueError if negative."""
    if amount < 0:
        raise ValueError(f"budget amount must be >= 0, got {amount}")
    team_id = team_by_name(session, team).id
    budget = session.get(Budget, (team_id, month_start(month)))
    if budget is None:
        budget = Budget(team_id=team_id, month=month_start(month), amount=quantize(amount), currency=currency)
        session.add(budget)
    else:
        budget.amount, budget.currency = quantize(amount), currency
    session.flush()
    return budget


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A team's month at a given instant: budget, spend so far, percent used, forecast month-end spend.

    Forecast = spend so far + (spend over the last 7 days ÷ the part of those 7 days the ledger covers)
    × time left in the month. Money is exact (6 decimals); ``used_percent`` has one decimal.
    """

    team: str
    month: datetime
    budget: Decimal
    spent: Decimal
    used_percent: Decimal
    forecast: Decimal
    currency: str


def _spend(session: Session, team_id: int, start: datetime, end: datetime) -> Decimal:
    """The team's allocated cost over ledger hours in [start, end)."""
    total = session.scalar(
        select(func.sum(LedgerEntry.allocated_cost)).where(
            LedgerEntry.team_id == team_id, LedgerEntry.hour >= start, LedgerEntry.hour < end
        )
    )
    return Decimal(0) if total is None else Decimal(total)


def budget_status(session: Session, at: datetime) -> list[BudgetStatus]:
    """Status of every budget set for the month holding ``at`` (UTC), by team name."""
    start, end = month_start(at), next_month_start(at)
    budgets = session.execute(
        select(Budget, Team.name).join(Team, Team.id == Budget.team_id).where(Budget.month == start).order_by(Team.name)
    ).all()
    first = session.scalar(select(func.min(LedgerEntry.hour)).where(LedgerEntry.hour >= at - RUN_RATE_WINDOW))
    span = (at - first).total_seconds() if first is not None else 0
    statuses = []
    for budget, team in budgets:
        spent = _spend(session, budget.team_id, start, at)
        recent = _spend(session, budget.team_id, at - RUN_RATE_WINDOW, at)
        rate = recent / Decimal(span) if span > 0 else Decimal(0)
        forecast = quantize(spent + rate * Decimal((end - at).total_seconds()))
        percent = quantize(spent * 100 / budget.amount, Decimal("0.1")) if budget.amount else Decimal(0)
        statuses.append(BudgetStatus(team, start, budget.amount, spent, percent, forecast, budget.currency))
    return statuses
