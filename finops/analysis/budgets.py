"""Monthly budgets per team (optionally per project): month-to-date spend, share used, a run-rate forecast,
and the threshold events the alerts package consumes.

Thresholds: 50 %, 80 % and 100 % of the month's budget actually spent, and the forecast month-end spend above
the budget. Each is recorded once per team, project and month (:mod:`finops.analysis.events`), when first seen.

A budget is set and removed here only (:func:`set_budget`, :func:`delete_budget`), for the command line and the
REST API alike: amounts, months, names and the currency are checked in this one place, every refusal is a
:class:`BudgetError` naming the field at fault, and every change is written to the audit log
(:mod:`finops.access.audit`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from sqlalchemy import ColumnElement, case, func, literal, or_, select
from sqlalchemy.orm import Session

from finops.access import audit
from finops.analysis.events import BUDGET_FORECAST, BUDGET_THRESHOLD, record_event
from finops.analysis.filters import Scope, ledger_conditions
from finops.analysis.report import cost_report
from finops.analysis.report_format import printed_cents
from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour
from finops.db.models import Budget, Job, Team, TeamRule
from finops.errors import FinopsError
from finops.jobs.teams import team_by_name, team_ids_by_name
from finops.ledger.costmodel import CENT, quantize
from finops.pricing.catalog import PriceCatalog, load_catalog
from finops.pricing.store import catalog_in_force
from finops.timeutil import month_start, next_month_start

RUN_RATE_WINDOW = timedelta(days=7)
THRESHOLDS_PERCENT = (50, 80, 100)
MAX_AMOUNT = Decimal(10) ** 12
"""Budget amounts are below this (a trillion currency units a month): well inside the ``budgets.amount`` column on
both databases (``NUMERIC(20, 6)``; integer micro-units, at most 9.2 × 10¹², on SQLite)."""
MAX_AMOUNT_TEXT = 64
"""Longest amount text taken (characters)."""
MAX_NAME = 128
"""Longest team or project name (characters): the width of ``teams.name`` and ``budgets.project``."""
YEARS = range(2000, 3000)
"""Years a budget month may be in."""
KNOWN_TEAMS_SHOWN = 20
"""Known team names an :class:`UnknownTeam` message lists at most."""
_MONTH = re.compile(r"(\d{4})-(\d{2})", re.ASCII)  # 0-9 only, not full-width ２０２６
_CURRENCY = re.compile(r"[A-Z]{3}")


class BudgetError(FinopsError, ValueError):
    """A budget request refused; ``field`` names the part at fault: ``team``, ``month``, ``project``, ``amount``
    or ``currency``. ``str(exc)`` is one line for the user."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class UnknownTeam(BudgetError):
    """The team of a budget is not known (:func:`known_teams`) and the request did not allow that."""


def _cut(text: str) -> str:
    """``text`` cut to 40 characters for a message."""
    return text if len(text) <= 40 else text[:40] + "…"


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut to 40 characters."""
    return repr(_cut(text))


def budget_month(at: datetime) -> datetime:
    """First instant (UTC) of the month holding ``at``, as a budget month: BudgetError (field ``month``) unless its
    year is in :data:`YEARS`."""
    start = month_start(at)
    if start.year not in YEARS:
        raise BudgetError("month", f"month {start:%Y-%m} is out of range: a budget month is in {YEARS[0]}–{YEARS[-1]}")
    return start


def parse_month(text: str) -> datetime:
    """First instant (UTC) of month ``text`` (``YYYY-MM``, a year in :data:`YEARS`); BudgetError (field ``month``)
    otherwise."""
    found = _MONTH.fullmatch(text)
    if found is None or not 1 <= int(found[2]) <= 12:
        raise BudgetError("month", f"month {_shown(text)} is not a month as YYYY-MM")
    if int(found[1]) not in YEARS:  # checked before datetime(), which refuses year 0 with a ValueError
        raise BudgetError("month", f"month {text} is out of range: a budget month is in {YEARS[0]}–{YEARS[-1]}")
    return budget_month(datetime(int(found[1]), int(found[2]), 1, tzinfo=UTC))


def parse_amount(amount: Decimal | str) -> Decimal:
    """A budget amount: decimal text (at most :data:`MAX_AMOUNT_TEXT` characters) or a Decimal, finite, more than 0,
    below :data:`MAX_AMOUNT`, with at most 6 decimals (the ledger's). BudgetError (field ``amount``) otherwise."""
    if isinstance(amount, str):
        try:
            if len(amount) > MAX_AMOUNT_TEXT or not amount.isascii():  # Decimal() takes full-width digits too
                raise InvalidOperation
            value = Decimal(amount)
        except InvalidOperation:
            raise BudgetError("amount", f"amount {_shown(amount)} is not a decimal number") from None
    else:
        value = amount
    if not value.is_finite():
        raise BudgetError("amount", f"amount {_cut(str(value))} is not a finite number")
    if value <= 0:
        raise BudgetError("amount", f"amount {_cut(str(value))} is not more than 0 (to remove a budget, delete it)")
    if value >= MAX_AMOUNT:
        raise BudgetError("amount", f"amount {_cut(str(value))} is not below {MAX_AMOUNT:,}")
    if quantize(value) != value:
        raise BudgetError("amount", f"amount {_cut(str(value))} has more than 6 decimals")
    return quantize(value)


def _name(text: str, field: str, *, empty: bool = False) -> str:
    """``text`` if it is a name for ``field``: printable, at most :data:`MAX_NAME` characters, not empty unless
    ``empty``; BudgetError otherwise."""
    if not text and not empty:
        raise BudgetError(field, f"{field} name is empty")
    if len(text) > MAX_NAME or not text.isprintable():
        raise BudgetError(field, f"{field} name {_shown(text)} is not up to {MAX_NAME} printable characters")
    return text


def known_teams(session: Session) -> list[str]:
    """Names of the known teams, sorted: those with a team rule, a job, a ledger hour or a budget (any month).

    A team row alone does not count: one is created for any name a rule, a job or a budget has named. The small
    tables are asked first, the jobs last (a team's jobs follow its rules, so few teams get that far)."""
    owned = [
        select(TeamRule.team_id).where(TeamRule.team_id == Team.id).exists(),
        select(Budget.month).where(Budget.team_id == Team.id).exists(),
        select(LedgerTeamHour.hour).where(LedgerTeamHour.team_id == Team.id).exists(),
        select(Job.id).where(Job.team_id == Team.id).exists(),
    ]
    return sorted(session.scalars(select(Team.name).where(or_(*owned))))


def check_known_team(session: Session, team: str) -> None:
    """UnknownTeam unless ``team`` is one of :func:`known_teams`."""
    known = known_teams(session)
    if team in known:
        return
    listed = ", ".join(known[:KNOWN_TEAMS_SHOWN]) or "none"
    more = f" and {len(known) - KNOWN_TEAMS_SHOWN} more" if len(known) > KNOWN_TEAMS_SHOWN else ""
    raise UnknownTeam("team", f"team {team} has no jobs or rules yet; known teams: {listed}{more}")


def set_budget(
    session: Session,
    team: str,
    amount: Decimal | str,
    month: datetime,
    currency: str | None = None,
    project: str = "",
    *,
    catalog: PriceCatalog | None = None,
    allow_unknown_team: bool = False,
    actor: str,
) -> Budget:
    """Set ``team``'s budget (or its ``project``'s) for the month holding ``month`` to ``amount``, replacing any
    (a budget stored in another currency too), and return it.

    ``amount``: decimal text or a Decimal (:func:`parse_amount`). ``currency``: an ISO 4217 code, which must be
    the currency of the price catalogue in force (the newest imported one, else ``catalog``: the configured one,
    default the packaged one); None means that currency. Budgets are not converted: spend is priced in that
    currency. ``team`` and ``project``: up to :data:`MAX_NAME` printable characters (``project`` "" = the whole
    team); ``month``'s year in :data:`YEARS`. A team that is not known (:func:`known_teams`) is refused with
    :class:`UnknownTeam` unless ``allow_unknown_team``, and then created.

    The change is audited as ``budget.set`` by ``actor``: team, project, month, amount and currency before (None:
    no budget) and after. Raises :class:`BudgetError` (field ``amount``, ``currency``, ``month``, ``project`` or
    ``team``) for any input refused; nothing is written then, not even an audit entry."""
    value = parse_amount(amount)
    in_force = catalog_in_force(session, catalog if catalog is not None else load_catalog()).currency
    if currency is not None and currency != in_force:
        if not _CURRENCY.fullmatch(currency):
            raise BudgetError("currency", f"currency {_shown(currency)} is not an ISO 4217 code such as {in_force}")
        raise BudgetError(
            "currency",
            f"budget currency {currency} is not the price catalogue's currency {in_force}: spend is priced in "
            f"{in_force} and budgets are not converted; give the amount in {in_force}",
        )
    first = budget_month(month)
    team, project = _name(team, "team"), _name(project, "project", empty=True)
    if not allow_unknown_team:
        check_known_team(session, team)
    team_id = team_by_name(session, team).id
    budget = session.get(Budget, (team_id, first, project))
    before = None if budget is None else _budget_state(team, budget)
    if budget is None:
        budget = Budget(team_id=team_id, month=first, project=project, amount=value, currency=in_force)
        session.add(budget)
    else:
        budget.amount, budget.currency = value, in_force
    session.flush()
    audit.record(session, actor, "budget.set", _subject(team, project, first), before, _budget_state(team, budget))
    return budget


def delete_budget(session: Session, team: str, month: datetime, project: str = "", *, actor: str) -> bool:
    """Remove ``team``'s (or its ``project``'s) budget for the month holding ``month``; False if there was none.
    The one way to remove a budget, for the command line and the REST API; audited as ``budget.delete`` by
    ``actor``. BudgetError (field ``team`` or ``project``) for a name no budget can have (:func:`set_budget`)."""
    team, project = _name(team, "team"), _name(project, "project", empty=True)
    team_row = session.scalars(select(Team).where(Team.name == team)).one_or_none()
    budget = None if team_row is None else session.get(Budget, (team_row.id, month_start(month), project))
    if budget is None:
        return False
    subject, before = _subject(team, project, budget.month), _budget_state(team, budget)
    session.delete(budget)
    session.flush()
    audit.record(session, actor, "budget.delete", subject, before, None)
    return True


def _budget_state(team: str, budget: Budget) -> dict[str, str]:
    """``budget`` of ``team`` as the audit log keeps it: ``team``, ``project`` ("" = the whole team), ``month``
    (``YYYY-MM``), ``amount`` (decimal text, 6 decimals), ``currency``."""
    return {
        "team": team,
        "project": budget.project,
        "month": f"{budget.month:%Y-%m}",
        "amount": str(quantize(budget.amount)),
        "currency": budget.currency,
    }


def _subject(team: str, project: str, month: datetime) -> str:
    """A budget as an audit subject: ``team vision month 2026-11``, ``team vision project llm month 2026-11``."""
    return f"team {team}{f' project {project}' if project else ''} month {month:%Y-%m}"


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A team's month at a given instant: budget, spend so far, percent used, forecast month-end spend.

    ``spent`` is in cents: a whole team's is its allocated cost over [month start, the instant) as the cost report
    by team over that period prints it (:func:`finops.analysis.report_format.printed_cents`: the report's rounding,
    so the two agree to the cent); a project's is its own sum rounded half-even. Forecast (6 decimals) = spent +
    (spend over the last 7 days ÷ the part of those 7 days the ledger covers) × time left in the month.
    ``used_percent`` has one decimal.

    ``budget`` is in ``currency``; spend and forecast are in ``spend_currency``, the ledger's. When they differ (a
    budget stored before budgets had to be in the price catalogue's currency, or before a catalogue in another
    currency was imported) the budget is not :attr:`comparable`: ``used_percent`` is NaN, no threshold is judged,
    and :attr:`problem` says what to do.
    """

    team: str
    project: str
    month: datetime
    budget: Decimal
    spent: Decimal
    used_percent: Decimal
    forecast: Decimal
    currency: str
    spend_currency: str

    @property
    def comparable(self) -> bool:
        """True when the budget and the spend are in the same currency."""
        return self.currency == self.spend_currency

    @property
    def problem(self) -> str | None:
        """None for a comparable budget; otherwise why it is not, and the fix, in one sentence."""
        if self.comparable:
            return None
        return (
            f"budget in {self.currency} but spend in {self.spend_currency}: not comparable; set the budget again "
            f"in {self.spend_currency}, or delete it"
        )

    @property
    def used_ratio(self) -> float:
        """Spent ÷ budget (0 for a zero budget, NaN when not :attr:`comparable`), for gauges."""
        if not self.comparable:
            return float("nan")
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
    month: datetime | None = None,
) -> dict[tuple[int, str], MonthSpend]:
    """:class:`MonthSpend` of each team in the month holding ``at`` (or in ``month``, its first instant, for a month
    that ``at`` closes: its end), keyed by (team id, project): project ``''`` (the whole team), or with
    ``by_project`` the project of the team's jobs (jobs without one left out). One query; ``scope``
    (:mod:`finops.analysis.filters`) and ``team_ids`` narrow the rows. Teams without rows are absent.

    Whole-team spend without a cluster or partition filter is read from the team-hours
    (:mod:`finops.ledger.team_hours`), the rest from the ledger."""
    scope = scope or Scope()
    start, window = month if month is not None else month_start(at), at - RUN_RATE_WINDOW
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


def _percent(spent: Decimal, budget: Decimal) -> Decimal:
    """``spent`` as a percent of ``budget`` to one decimal; 0 for a zero budget."""
    return quantize(spent * 100 / budget, Decimal("0.1")) if budget else Decimal(0)


def budget_status(
    session: Session,
    at: datetime,
    *,
    team: str | None = None,
    spend: Mapping[tuple[int, str], MonthSpend] | None = None,
    month: datetime | None = None,
) -> list[BudgetStatus]:
    """Status of every budget set for the month holding ``at`` (UTC), by team name and project; only ``team``'s
    budgets when it is given. ``spend``: the whole-team :func:`month_spend` at ``at`` when the caller has it
    already (it must cover the teams of the budgets), so the run-rate window is not read twice. ``month``: the
    first instant of the month instead, when ``at`` is that month's end (a closed month: its forecast is its spend);
    ValueError unless ``month`` ≤ ``at`` ≤ its end.

    A whole team's ``spent`` is its row of :func:`finops.analysis.report.cost_report` by team over
    [month start, ``at``) (of ``team`` only when given, as ``gpu-finops report --team`` reads it), in the cents
    the report prints. Spend is in the currency of the ledger's newest hour (the budget's own while the ledger is
    empty)."""
    start = month_start(at) if month is None else month_start(month)
    end = next_month_start(start)
    if not start <= at <= end:
        raise ValueError(f"{at.isoformat()} is not in the month {start:%Y-%m} or at its end")
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
        spend = month_spend(session, at, team_ids=ids, month=start)
    if any(budget.project for budget, _ in budgets):
        spend = {**spend, **month_spend(session, at, by_project=True, team_ids=ids, month=start)}
    report = cost_report(session, start, at, "team", team=team)
    team_cents = dict(zip((row.key for row in report), printed_cents(report, "allocated_cost"), strict=True))
    ledger_currency = session.scalar(select(LedgerTeamHour.currency).order_by(LedgerTeamHour.hour.desc()).limit(1))
    statuses = []
    nothing = MonthSpend(Decimal(0), Decimal(0))
    for budget, team_name in budgets:
        found = spend.get((budget.team_id, budget.project), nothing)
        spent = quantize(found.spent, CENT) if budget.project else team_cents.get(team_name, Decimal("0.00"))
        forecast = run_rate_forecast(spent, found.recent, span, (end - at).total_seconds())
        spend_currency = ledger_currency or budget.currency
        percent = Decimal("NaN") if spend_currency != budget.currency else _percent(spent, budget.amount)
        statuses.append(
            BudgetStatus(
                team_name, budget.project, start, budget.amount, spent, percent, forecast, budget.currency,
                spend_currency,
            )
        )  # fmt: skip
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
        if not status.budget or not status.comparable:
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
