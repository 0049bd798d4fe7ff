"""The monthly showback statement of one team: what its GPUs cost in a month, against its budget, who and what spent
it, what of it was idle and why, how much of its GPUs' SMs it kept busy, and what right-sizing would save.

A :class:`Statement` is pure data, made by :func:`build_statement` from the ledger: the team, the month, the period it
covers [start, end) (the whole month once the month has ended, else the month to date), the currency, and a list of
:class:`Section`, each a table whose :class:`Column` says what its cells are (text, money, GPU-hours, percent).
Renderers (the text and the CSV in :mod:`finops.savings.showback_render`, the e-mail in :mod:`alerts.showback`) walk the
sections and need to know none of them; the statement's shape is :mod:`finops.savings.showback_statement`'s. Money is
``Decimal`` in cents: each section's money column is rounded by :func:`finops.ledger.costmodel.round_preserving_total`,
so its rows add up to its total, and the team's spend is the cost report's by team to the cent
(:func:`finops.analysis.report_format.printed_cents`, as the budgets read it).

Sections, in order (their :attr:`Section.key`):

- ``spend``: the team's row of the cost report by team over the period: GPU-hours, allocated cost (the spend),
  used and idle cost, utilisation (used ÷ metered GPU-seconds), GPU-hours without a price (never costed as 0).
- ``budget``: each budget of the team and its projects for the month (:func:`finops.analysis.budgets.budget_status`):
  amount, spent, percent used, the run-rate forecast while the month runs, and a verdict. No budget: no rows and a
  note saying so and how to set one.
- ``top_jobs`` and ``top_users``: the cost report by job and by user, of the team, costliest first; the e-mail shows
  the first :data:`SHOWN_ROWS` and one line for the rest, the CSV every row up to :data:`MAX_ROWS`.
- ``idle_by_reason``: the team's idle cost by probable waste reason (:class:`IdleReason`, from
  :func:`finops.savings.waste_costs.idle_cost_by_reason`: the ledger's idle cost, allocated − used, of each job-held
  GPU-hour under its reason; for ``no reading``, the allocated cost of the GPU-hours without readings), in the
  reasons' precedence; the note adds the idle episodes overlapping the period
  (:func:`finops.analysis.idle.episode_totals`).
- ``efficiency`` and ``inefficient_jobs``: the team's SM activity, band, profiled share, SM-active and inactive
  cost, and its busy-but-inefficient jobs with their probable bottleneck, from the efficiency report
  (:mod:`finops.savings.showback_efficiency`); *not measured*, with the fix, for a team without profiling data.
- ``rightsizing``: the savings of right-sizing, one :class:`Saving` per job (:mod:`finops.savings.rightsizing`),
  which judges a GPU's use by SM activity where it was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from finops.analysis.budgets import BudgetStatus, budget_status, check_known_team
from finops.analysis.idle import EpisodeTotals, episode_totals, list_episodes
from finops.analysis.report import ReportRow, UnpricedModel, cost_report, unpriced_by_model
from finops.analysis.report_format import printed_cents
from finops.analysis.waste import NO_READING, REASONS, ReasonPolicy
from finops.db.hours import pending_hours
from finops.db.models import UNALLOCATED_TEAM, UNMAPPED_TEAM, Budget, Team
from finops.ledger.costmodel import CENT, float_decimal, quantize, round_preserving_total
from finops.pricing.catalog import load_catalog
from finops.pricing.store import catalog_in_force
from finops.savings.efficiency import efficiency_report
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.savings.rightsizing import rightsizing
from finops.savings.rightsizing_policy import JobFinding
from finops.savings.showback_efficiency import efficiency_sections
from finops.savings.showback_statement import Cell, Column, IdleReason, Saving, Section, Statement, money, sum_cells
from finops.savings.waste_costs import BUSY_JOB_TITLE, ReasonCost, idle_cost_by_reason
from finops.timeutil import month_start, next_month_start

SHOWN_ROWS = 10
"""Rows of the job and user tables the e-mail and the text show; the rest is one line."""
MAX_ROWS = 1000
"""Rows of a section the statement keeps (the CSV's); the rest is one row "N more jobs"."""
SPECIAL_TEAMS = frozenset({UNALLOCATED_TEAM, UNMAPPED_TEAM})
"""Ledger "teams" that are not teams: capacity no job held, jobs whose account maps to no team. No statement."""


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 6)


def _percent(part: float | Decimal, whole: float | Decimal) -> Decimal | None:
    """``part`` as a percent of ``whole`` to one decimal (None for a zero whole); floats by their shortest text."""
    if not whole:
        return None
    exact = [value if isinstance(value, Decimal) else float_decimal(value) for value in (part, whole)]
    return quantize(exact[0] * 100 / exact[1], Decimal("0.1"))


def statement_period(month: datetime, now: datetime) -> tuple[datetime, datetime, bool]:
    """[start, end) of the statement of ``month`` (any instant in it) made at ``now``, and whether the month has
    ended: the whole month, or the month to date. ValueError for a month that has not begun."""
    start, end = month_start(month), next_month_start(month)
    if now <= start:
        raise ValueError(f"month {start:%Y-%m} has not begun")
    return start, min(end, now), now >= end


def statement_teams(session: Session, month: datetime, now: datetime) -> list[str]:
    """The teams that get a statement for ``month`` at ``now``, sorted: those with GPU time in the ledger in the
    period (:func:`statement_period`) or a budget for the month; not :data:`SPECIAL_TEAMS`."""
    start, end, _ = statement_period(month, now)
    spending = {row.key for row in cost_report(session, start, end, "team") if row.allocated_gpu_seconds}
    budgeted = set(
        session.scalars(select(Team.name).join(Budget, Budget.team_id == Team.id).where(Budget.month == start))
    )
    return sorted((spending | budgeted) - SPECIAL_TEAMS)


def idle_reasons(costs: Sequence[ReasonCost]) -> list[IdleReason]:
    """The statement's idle rows from :func:`finops.savings.waste_costs.idle_cost_by_reason`'s rows of one team and
    month (a statement's period lies in one month), in their order: the reasons' precedence."""
    return [IdleReason(c.reason, c.title, _hours(c.gpu_seconds), c.cost, _hours(c.unpriced_gpu_seconds)) for c in costs]


def build_statement(
    session: Session,
    team: str,
    month: datetime,
    now: datetime,
    *,
    idle_window_seconds: int = 1800,
    reasons: ReasonPolicy = ReasonPolicy(),  # noqa: B008 - frozen dataclass: a safe default
    efficiency: EfficiencyPolicy = EfficiencyPolicy(),  # noqa: B008 - frozen dataclass: a safe default
) -> Statement:
    """The statement of ``team`` for ``month`` (any instant in it) as the ledger has it at ``now`` (module
    docstring). ``idle_window_seconds``: the idle policy's window, named in the idle section's note; ``reasons``: the
    waste reasons' thresholds (the ``FINOPS_WASTE_*`` settings), as ``gpu-finops report --by reason`` takes them;
    ``efficiency``: the bands' and bottlenecks' (the ``FINOPS_EFFICIENCY_*`` settings), as ``--by efficiency``.

    Raises :class:`finops.analysis.budgets.UnknownTeam` for a team with no jobs, rules, ledger hours or budgets
    (the message lists the known ones), ValueError for a month that has not begun."""
    check_known_team(session, team)
    start, end, complete = statement_period(month, now)
    team_rows = cost_report(session, start, end, "team", team=team)
    row = team_rows[0] if team_rows else None
    jobs = cost_report(session, start, end, "job", team=team)
    users = cost_report(session, start, end, "user", team=team)
    statuses = budget_status(session, end, team=team, month=start)
    episodes = list_episodes(session, start, end, team=team)
    unpriced = unpriced_by_model(session, start, end, team=team)
    catalog = catalog_in_force(session, load_catalog())
    fallback_currency = statuses[0].spend_currency if statuses else catalog.currency
    currency = row.currency if row is not None else fallback_currency
    spent = printed_cents(team_rows, "allocated_cost")[0] if row is not None else Decimal("0.00")
    idle = printed_cents(team_rows, "idle_cost")[0] if row is not None else Decimal("0.00")

    idle_rows = idle_reasons(idle_cost_by_reason(session, start, end, team=team, policy=reasons))
    savings = team_savings(rightsizing(session, start, end, catalog=catalog, priced_at=now, team=team).findings)
    efficient = efficiency_sections(
        efficiency_report(session, start, end, policy=efficiency, team=team), team, max_rows=MAX_ROWS
    )

    sections = (
        _spend_section(row, spent, unpriced_text=_unpriced_note(unpriced)),
        _budget_section(team, start, statuses, complete),
        _jobs_section(jobs),
        _users_section(users),
        idle_section(idle_rows, episode_totals(episodes), idle_window_seconds),
        *efficient,
        rightsizing_section(savings),
    )
    whole = next((s for s in statuses if not s.project), None)
    summary, facts = _headline(team, start, complete, spent, idle, whole, currency)
    if unpriced:
        hours = sum(u.gpu_hours for u in unpriced)
        summary += f" {hours:,.2f} GPU-hours had no price and are not in these amounts."
    return Statement(
        team=team,
        month=start,
        start=start,
        end=end,
        complete=complete,
        currency=currency,
        made_at=now,
        summary=summary,
        facts=facts,
        sections=sections,
        pending_hours=pending_hours(session, start, end, now),
    )


def _unpriced_note(unpriced: Sequence[UnpricedModel]) -> str:
    """One sentence per GPU model without a price: its GPU-hours and the fix."""
    return " ".join(f"{u.gpu_hours:,.2f} GPU-hours of {u.model} have no price: {u.fix}" for u in unpriced)


def _spend_section(row: ReportRow | None, spent: Decimal, *, unpriced_text: str) -> Section:
    columns: tuple[Column, ...] = (
        Column("gpu_hours", "GPU-hours held", "hours"),
        Column("allocated_cost", "Spend (allocated cost)", "money"),
        Column("used_cost", "Used", "money"),
        Column("idle_cost", "Idle", "money"),
        Column("utilization_percent", "Utilisation", "percent"),
        Column("unpriced_gpu_hours", "GPU-hours without a price", "hours"),
    )
    if row is None:
        return Section("spend", "Spend", columns, note="No GPU time was billed to the team in this period.")
    used, idle = round_preserving_total([row.used_cost, row.idle_cost])
    metered = row.used_gpu_seconds + row.idle_gpu_seconds
    cells: tuple[Cell, ...] = (
        _hours(row.allocated_gpu_seconds),
        None if row.unpriced_only else spent,
        None if row.unpriced_only else used,
        None if row.unpriced_only else idle,
        _percent(row.used_gpu_seconds, metered),
        _hours(row.unpriced_gpu_seconds),
    )
    if not row.unpriced_gpu_seconds:  # every GPU-hour priced: no column of zeros
        columns, cells = columns[:-1], cells[:-1]
    note = (
        "Spend is the cost of the GPUs the team's jobs held; of it, used is the share they kept busy "
        "(utilisation × cost) and idle the rest."
    )
    if row.unmetered_gpu_seconds:
        note += f" {_hours(row.unmetered_gpu_seconds):,.2f} GPU-hours had no reading: neither used nor idle."
    if unpriced_text:
        note += f" {unpriced_text}"
    return Section("spend", "Spend", columns, (cells,), note=note)


def _budget_section(team: str, month: datetime, statuses: Sequence[BudgetStatus], complete: bool) -> Section:
    columns = [
        Column("budget_scope", "Budget of", "text"),
        Column("budget", "Budget", "money"),
        Column("spent", "Spent", "money"),
        Column("used_percent", "Used", "percent"),
    ]
    if not complete:
        columns.append(Column("forecast", "Forecast month-end", "money"))
    columns.append(Column("budget_verdict", "Verdict", "text"))
    if not statuses:
        note = (
            f"No budget was set for team {team} for {month:%Y-%m} "
            f"(gpu-finops budget set {team} AMOUNT --month {month:%Y-%m})."
        )
        return Section("budget", "Budget", tuple(columns), note=note)
    rows = []
    for status in statuses:
        cells: list[Cell] = [
            f"project {status.project}" if status.project else "whole team",
            quantize(status.budget, CENT),
            status.spent,
            status.used_percent if status.comparable else None,
        ]
        if not complete:
            cells.append(quantize(status.forecast, CENT))
        cells.append(_verdict(status, complete))
        rows.append(tuple(cells))
    return Section("budget", "Budget", tuple(columns), tuple(rows))


def _verdict(status: BudgetStatus, complete: bool) -> str:
    """What the budget's figures mean, in a few words."""
    if status.problem is not None:
        return status.problem
    over = status.spent - quantize(status.budget, CENT)
    if over > 0:
        return f"over budget by {money(over, status.currency)}"
    if not complete and status.forecast > status.budget:
        return "within budget so far; the forecast is over"
    return "within budget"


def _top(rows: Sequence[ReportRow], labels: Sequence[tuple[str, ...]], noun: str) -> tuple[tuple[Cell, ...], ...]:
    """One row per report row: its ``labels``, GPU-hours, cost and idle cost in the report's cents (None when all
    its GPU-hours are unpriced); past :data:`MAX_ROWS`, one row "N more …" of the rest."""
    allocated, idle = printed_cents(rows, "allocated_cost"), printed_cents(rows, "idle_cost")
    cells: list[tuple[Cell, ...]] = [
        (*label, _hours(row.allocated_gpu_seconds), None if row.unpriced_only else a, None if row.unpriced_only else i)
        for row, label, a, i in zip(rows, labels, allocated, idle, strict=True)
    ]
    if len(cells) <= MAX_ROWS:
        return tuple(cells)
    rest = cells[MAX_ROWS - 1 :]
    width = len(labels[0])
    more: tuple[Cell, ...] = (
        f"{len(rest)} more {noun}",
        *[""] * (width - 1),
        *(sum_cells([r[i] for r in rest]) for i in range(width, width + 3)),
    )
    return (*cells[: MAX_ROWS - 1], more)


def _totals(columns: Sequence[Column], rows: Sequence[tuple[Cell, ...]], label: str = "Total") -> tuple[Cell, ...]:
    """The total row of a table: ``label`` in the first column, the sum of each money and hours column."""
    cells: list[Cell] = []
    for index, column in enumerate(columns):
        if index == 0:
            cells.append(label)
        elif column.kind in ("money", "hours"):
            cells.append(sum_cells([row[index] for row in rows]))
        else:
            cells.append("")
    return tuple(cells)


_COST_COLUMNS = (
    Column("gpu_hours", "GPU-hours", "hours"),
    Column("allocated_cost", "Cost", "money"),
    Column("idle_cost", "Idle", "money"),
)


def _jobs_section(rows: Sequence[ReportRow]) -> Section:
    columns = (
        Column("job", "Job", "text"),
        Column("job_name", "Name", "text"),
        Column("user", "User", "text"),
        *_COST_COLUMNS,
    )
    if not rows:
        return Section("top_jobs", "Top jobs", columns, note="No job of the team held a GPU in this period.")
    labels = [(row.key, row.job.name if row.job else "", row.user or "") for row in rows]
    cells = _top(rows, labels, "jobs")
    return Section("top_jobs", "Top jobs", columns, cells, _totals(columns, cells), shown=SHOWN_ROWS, noun="jobs")


def _users_section(rows: Sequence[ReportRow]) -> Section:
    columns = (Column("user", "User", "text"), *_COST_COLUMNS)
    if not rows:
        return Section("top_users", "Top users", columns, note="No user of the team held a GPU in this period.")
    cells = _top(rows, [(row.key,) for row in rows], "users")
    return Section("top_users", "Top users", columns, cells, _totals(columns, cells), shown=SHOWN_ROWS, noun="users")


def idle_section(
    reasons: Sequence[IdleReason], episodes: Sequence[EpisodeTotals], idle_window_seconds: int = 1800
) -> Section:
    """The ``idle_by_reason`` section: one row per reason (GPU-hours, cost in cents adding up to the total; a reason
    whose GPU-hours all lack a price has no cost, not 0, and a column of GPU-hours without a price is added when any
    lack one), and a note on what the costs are and on ``episodes`` (:func:`finops.analysis.idle.episode_totals` of
    the episodes overlapping the period)."""
    columns: tuple[Column, ...] = (
        Column("idle_reason", "Reason", "text"),
        Column("idle_gpu_hours", "Idle GPU-hours", "hours"),
        Column("idle_cost", "Idle cost", "money"),
    )
    unpriced = any(r.unpriced_gpu_hours for r in reasons)
    if unpriced:
        columns += (Column("idle_unpriced_gpu_hours", "GPU-hours without a price", "hours"),)
    note = (
        "Idle cost is the cost of GPU time the team's jobs held but did not use (allocated − used), each GPU-hour "
        f"under its probable reason (docs/waste-reasons.md); '{REASONS[NO_READING].title}' is the cost of GPU-hours "
        f"without a reading (whether they were used is unknown) and '{BUSY_JOB_TITLE}' the unused share of jobs whose "
        "use is not low."
    )
    for totals in episodes:
        priced = money(totals.cost, totals.currency) if not totals.all_unpriced else "unpriced"
        note += (
            f" {totals.count} idle episode{'s' if totals.count != 1 else ''} (a GPU idle for "
            f"{idle_window_seconds // 60} min or longer) overlap the period: {totals.gpu_hours:,.2f} GPU-hours, "
            f"{priced}{' for the priced ones' if totals.unpriced_gpu_hours and not totals.all_unpriced else ''}."
        )
    if not reasons:
        return Section("idle_by_reason", "Idle cost by reason", columns, note=note)
    cents = round_preserving_total([r.cost for r in reasons])
    rows = tuple(
        (
            r.title,
            r.gpu_hours,
            None if r.unpriced_gpu_hours >= r.gpu_hours > 0 and not r.cost else c,
            *((r.unpriced_gpu_hours,) if unpriced else ()),
        )
        for r, c in zip(reasons, cents, strict=True)
    )
    return Section("idle_by_reason", "Idle cost by reason", columns, rows, _totals(columns, rows), note=note)


def team_savings(findings: Sequence[JobFinding]) -> list[Saving]:
    """The statement's right-sizing rows from :func:`finops.savings.rightsizing.rightsizing`'s findings: per job the
    fewer GPUs it should have asked for when that saves anything (the GPU-hours it would not have held), else the
    cheaper of its MIG profile and smaller model (the same GPU-hours, on less; 0 GPU-hours saved). A finding with no
    saving of any kind (unpriced) keeps its change with an unknown saving."""
    savings = []
    for f in findings:
        if f.count_fix is not None and f.saved_gpu_seconds > 0:
            savings.append(Saving(f.job_id, f.user, f.count_fix, f.saved_gpu_seconds / 3600, f.count_saving))
            continue
        options = [(v, fix) for v, fix in ((f.mig_saving, f.mig_fix), (f.smaller_model_saving, f.model_fix)) if fix]
        if options:
            saving, fix = max(options, key=lambda option: option[0] or Decimal(0))
            savings.append(Saving(f.job_id, f.user, str(fix), 0.0, saving))
    return savings


def rightsizing_section(savings: Sequence[Saving]) -> Section:
    """The ``rightsizing`` section: one row per job (its change, GPU-hours saved, saving in cents adding up to the
    total), largest saving first; none: a note that no job would have cost less."""
    columns = (
        Column("job", "Job", "text"),
        Column("user", "User", "text"),
        Column("change", "Change", "text"),
        Column("gpu_hours_saved", "GPU-hours saved", "hours"),
        Column("saving", "Saving", "money"),
    )
    title = "Right-sizing savings"
    if not savings:
        return Section(
            "rightsizing", title, columns, note="No job of the team would have cost less with a smaller request."
        )
    ordered = sorted(savings, key=lambda s: (s.saving is None, -(s.saving or 0), s.job_id))
    cents = round_preserving_total([s.saving or Decimal(0) for s in ordered])
    rows = tuple(
        (s.job_id, s.user, s.change, s.gpu_hours_saved, None if s.saving is None else c)
        for s, c in zip(ordered, cents, strict=True)
    )
    return Section("rightsizing", title, columns, rows, _totals(columns, rows), shown=SHOWN_ROWS, noun="jobs")


def _headline(
    team: str,
    month: datetime,
    complete: bool,
    spent: Decimal,
    idle: Decimal,
    budget: BudgetStatus | None,
    currency: str,
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The statement's summary paragraph and facts."""
    period = f"in {month:%B %Y}" if complete else f"in {month:%B %Y} so far"
    text = f"Team {team} spent {money(spent, currency)} on GPUs {period}"
    facts = [("Team", team), ("Month", f"{month:%Y-%m}"), ("Spend", money(spent, currency))]
    if budget is None:
        text += " (no budget set)"
    elif budget.comparable:
        text += f", {budget.used_percent} % of its {money(budget.budget, budget.currency)} budget"
        facts += [("Budget", money(budget.budget, budget.currency)), ("Budget used", f"{budget.used_percent} %")]
    else:
        text += f" (budget not comparable: {budget.problem})"
    share = _percent(idle, spent)
    text += f"; {money(idle, currency)} of it was idle" + (f" ({share} %)." if share is not None else ".")
    facts.append(("Idle cost", money(idle, currency)))
    return text, tuple(facts)
