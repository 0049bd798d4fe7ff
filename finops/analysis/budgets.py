"""Monthly budgets per team (optionally per project): month-to-date spend, share used, a run-rate forecast,
and the threshold events the alerts package consumes.

Thresholds: 50 %, 80 % and 100 % of the month's budget actually spent, and the forecast month-end spend above
the budget. Each is recorded once per team, project and month (:mod:`finops.analysis.events`), when first seen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import ColumnElement, case, func, literal, select
from sqlalchemy.orm import Session

from finops.analysis.events import BUDGET_FORECAST, BUDGET_THRESHOLD, record_event
from finops.analysis.filters import Scope, ledger_conditions
from finops.db.models import Budget, Job, LedgerEntry, LedgerTeamHour, Team
from finops.jobs.teams import team_by_name, team_ids_by_name
from finops.ledger.costmodel import quantize
from finops.timeutil import month_start, next_month_start

RUN_RATE_WINDOW = timedelta(days=7)
THRESHOLDS_PERCENT = (50, 80, 100)


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


@dataclass(frozen=True, slots=True)
class MonthSpend:
    """Allocated cost (exact, 6 decimals) of ledger hours in [month start, ``at``) and in the run-rate window
    [``at`` − 7 days, ``at``)."""

    spent: Decimal
    recent: Decimal


def month_spend(
    session: Session,
    at: datetime,
    *,
    by_project: bool = False,
    scope: Scope | None = None,
    team_ids: Collection[int] | None = None,
) -> dict[tuple[int, str], MonthSpend]:
    """:class:`MonthSpend` of each team in the month holding ``at``, keyed by (team id, project): project ``''``
    (the whole team), or with ``by_project`` the project of the team's jobs (jobs without one left out). One
    query; ``scope`` (:mod:`finops.analysis.filters`) and ``team_ids`` narrow the rows. Teams without rows are absent.

    Whole-team spend without a cluster or partition filter is read from the team-hours
    (:mod:`finops.ledger.team_hours`), the rest from the ledger."""
    scope = scope or Scope()
    start, window = month_start(at), at - RUN_RATE_WINDOW
    source: type[LedgerTeamHour] | type[LedgerEntry]
    conditions: list[ColumnElement[bool]]
    if by_project or scope.cluster is not None or scope.partition is not None:
        source, conditions = LedgerEntry, ledger_conditions(scope)
    else:
        source = LedgerTeamHour
        conditions = [] if scope.team is None else [source.team_id.in_(select(Team.id).where(Team.name == scope.team))]
    if team_ids is not None:
        conditions.append(source.team_id.in_(team_ids))
    spent = func.sum(case((source.hour >= start, source.allocated_cost), else_=0))
    recent = func.sum(case((source.hour >= window, source.allocated_cost), else_=0))
    project = Job.project if by_project else literal("")
    query = select(source.team_id, project, spent, recent).where(
        source.hour >= min(start, window), source.hour < at, *conditions
    )
    if by_project:
        query = query.join(Job, Job.id == LedgerEntry.job_pk).where(Job.project.is_not(None))
    query = query.group_by(source.team_id, project) if by_project else query.group_by(source.team_id)
    return {
        (team_id, name or ""): MonthSpend(Decimal(s or 0), Decimal(r or 0))
        for team_id, name, s, r in session.execute(query)
    }


def run_rate_seconds(session: Session, at: datetime) -> float:
    """Seconds of the run-rate window before ``at`` that the ledger covers: from its first hour within the last
    7 days to ``at`` (0 when the ledger has no row in the window)."""
    first = session.scalar(select(func.min(LedgerEntry.hour)).where(LedgerEntry.hour >= at - RUN_RATE_WINDOW))
    return (at - first).total_seconds() if first is not None else 0


def run_rate_forecast(spent: Decimal, recent: Decimal, covered_seconds: float, left_seconds: float) -> Decimal:
    """Month-end spend forecast (6 decimals): ``spent`` + ``recent`` (the spend over the run-rate window) ÷
    ``covered_seconds`` (:func:`run_rate_seconds`) × ``left_seconds`` of the month; ``spent`` when nothing is
    covered."""
    rate = recent / Decimal(covered_seconds) if covered_seconds > 0 else Decimal(0)
    return quantize(spent + rate * Decimal(left_seconds))


def budget_status(
    session: Session,
    at: datetime,
    *,
    team: str | None = None,
    spend: Mapping[tuple[int, str], MonthSpend] | None = None,
) -> list[BudgetStatus]:
    """Status of every budget set for the month holding ``at`` (UTC), by team name and project; only ``team``'s
    budgets when it is given. ``spend``: the whole-team :func:`month_spend` at ``at`` when the caller has it
    already (it must cover the teams of the budgets), so the ledger is not read twice."""
    start, end = month_start(at), next_month_start(at)
    query = (
        select(Budget, Team.name)
        .join(Team, Team.id == Budget.team_id)
        .where(Budget.month == start)
        .order_by(Team.name, Budget.project)
    )
    if team is not None:
        query = query.where(Team.name == team)
    budgets = session.execute(query).all()
    if not budgets:
        return []
    span = run_rate_seconds(session, at)
    ids = [budget.team_id for budget, _ in budgets]
    if spend is None:
        spend = month_spend(session, at, team_ids=ids)
    if any(budget.project for budget, _ in budgets):
        spend = {**spend, **month_spend(session, at, by_project=True, team_ids=ids)}
    statuses = []
    nothing = MonthSpend(Decimal(0), Decimal(0))
    for budget, team_name in budgets:
        found = spend.get((budget.team_id, budget.project), nothing)
        spent, recent = found.spent, found.recent
        forecast = run_rate_forecast(spent, recent, span, (end - at).total_seconds())
        percent = quantize(spent * 100 / budget.amount, Decimal("0.1")) if budget.amount else Decimal(0)
        statuses.append(
            BudgetStatus(team_name, budget.project, start, budget.amount, spent, percent, forecast, budget.currency)
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
