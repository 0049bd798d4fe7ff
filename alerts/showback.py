"""Monthly showback statements as messages, queued once per team and month in the alerts outbox.

A team's :class:`finops.savings.showback_statement.Statement` goes to its route
(:meth:`alerts.config.AlertConfig.showback_route`):

- to the route's e-mail recipients, the whole statement (:func:`statement_email`): the plain text
  (:func:`finops.savings.showback_render.statement_text`), its HTML alternative (:func:`statement_html`) and the CSV of
  every row (:func:`finops.savings.showback_render.statement_csv`) as an attachment;
- to the route's Slack webhooks, a summary (:func:`statement_chat`): the headline, the figures as fields and a link
  to the team's page of the dashboard over the statement's period.

The HTML is written as :mod:`alerts.mail` writes alert e-mail, for clients that drop ``<style>`` blocks and
external CSS (Gmail, Outlook): tables for layout, every style inline, no image, script or stylesheet; each section a
bordered table with a header row, zebra rows, amounts right-aligned in tabular figures and a bold total row; a
section of one row as a table of facts. Every value is HTML-escaped.

Exactly once (:func:`queue_statement`): the statement's row in ``showback_statements``, keyed by team and month, is
inserted in the same transaction as its outbox rows, and only when no row exists; a second run, a concurrent one or
a command sent by hand for a month already queued queues nothing. The outbox then delivers with the alerts'
retries and their at-least-once window (:mod:`alerts.delivery`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import AlertConfig
from alerts.engine import queue
from alerts.mail import BORDER, FONT, SEVERITY_COLOURS, ZEBRA, fact_rows, html_button, html_cell, html_page
from alerts.message import Attachment, Document, Message
from alerts.models import ShowbackStatement
from alerts.render import message_to_payload
from finops.access import audit
from finops.analysis.budgets import check_known_team
from finops.analysis.waste import ReasonPolicy
from finops.db.dialect import insert_unless_exists
from finops.db.hours import pending_hours
from finops.db.models import Team
from finops.errors import FinopsError
from finops.jobs.teams import team_by_name
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.savings.showback import build_statement, statement_period, statement_teams
from finops.savings.showback_render import (
    cell_text,
    csv_filename,
    pending_note,
    shown_rows,
    statement_csv,
    statement_text,
)
from finops.savings.showback_statement import Section, Statement
from finops.timeutil import next_month_start

COLOUR = SEVERITY_COLOURS["info"]
"""The bar above a statement."""
NAME_WIDTH = 28
"""A job name longer than this (characters) is cut in the e-mail's table; the CSV has it whole."""
_TEXT = f"font-family:{FONT};color:#1f2328;"
# Narrower margins and cell padding than an alert's: a six-column table still fits a 360 px phone screen.
_CELL = f"{_TEXT}font-size:13px;line-height:18px;padding:6px;border:{BORDER};"


@dataclass(frozen=True, slots=True)
class Queued:
    """What :func:`queue_statement` did for a team and month: ``queued`` (False: already queued before, at
    ``queued_at``, or no target), the route, and the outbox ids of the statement (this call's or the earlier one's)."""

    team: str
    month: datetime
    queued: bool
    route: str
    deliveries: tuple[int, ...]
    queued_at: datetime | None


def statement_link(dashboard_url: str, statement: Statement) -> str | None:
    """The team's page of the dashboard over the statement's days (``teams?period=custom&from=…&to=…&team=…``);
    None without a dashboard URL."""
    if not dashboard_url:
        return None
    last_day = next_month_start(statement.month) - timedelta(days=1) if statement.complete else statement.end
    query = urlencode({"period": "custom", "from": f"{statement.start:%Y-%m-%d}", "to": f"{last_day:%Y-%m-%d}",
                       "team": statement.team})  # fmt: skip
    return f"{dashboard_url.rstrip('/')}/teams?{query}"


def _table(section: Section) -> str:
    """A section's rows as a bordered table: a header row, the rows :func:`shown_rows` gives (zebra), the total."""
    head = "".join(
        html_cell(c.title, f"{_CELL}font-weight:600;background-color:#eaeef2;text-align:{_align(c.kind)};", "th",
                  scope="col")
        for c in section.columns
    )  # fmt: skip
    body = []
    for number, row in enumerate(shown_rows(section)):
        cells = "".join(_data_cell(c.kind, v, c.key == "job_name") for c, v in zip(section.columns, row, strict=True))
        body.append(f'<tr style="background-color:{ZEBRA[number % 2]};">{cells}</tr>')
    if section.total is not None:
        cells = "".join(
            html_cell(cell_text(v, c.kind), f"{_CELL}font-weight:600;border-top:2px solid #1f2328;"
                      f"text-align:{_align(c.kind)};{_numeric(c.kind)}")
            for c, v in zip(section.columns, section.total, strict=True)
        )  # fmt: skip
        body.append(f'<tr style="background-color:#ffffff;">{cells}</tr>')
    return (
        '<td style="padding:0 16px 20px 16px;"><table width="100%" cellpadding="0" cellspacing="0" '
        f'style="width:100%;border-collapse:collapse;border:{BORDER};"><tr>{head}</tr>{"".join(body)}</table></td>'
    )


def _align(kind: str) -> str:
    return "left" if kind == "text" else "right"


def _numeric(kind: str) -> str:
    return "" if kind == "text" else "font-variant-numeric:tabular-nums;white-space:nowrap;"


def _data_cell(kind: str, value: object, name: bool) -> str:
    text = cell_text(value, kind)  # type: ignore[arg-type]
    if name and len(text) > NAME_WIDTH:
        text = text[: NAME_WIDTH - 1] + "…"
    return html_cell(text, f"{_CELL}text-align:{_align(kind)};{_numeric(kind)}", align=_align(kind))


def _facts(section: Section, currency: str) -> str:
    """A section of one row as a table of facts: each column's title and value (money with its currency)."""
    pairs = [
        (c.title, cell_text(v, c.kind) + (f" {currency}" if c.kind == "money" and v is not None else ""))
        for c, v in zip(section.columns, section.rows[0], strict=True)
    ]
    return (
        '<td style="padding:0 16px 20px 16px;"><table width="100%" cellpadding="0" cellspacing="0" '
        f'style="width:100%;border-collapse:collapse;border:{BORDER};">{fact_rows(pairs)}</table></td>'
    )


def statement_html(statement: Statement, dashboard_url: str) -> str:
    """The statement as an HTML e-mail (module docstring): the month and team, the summary, a note when ledger
    hours were pending, each section (title, note, table), a button to the dashboard, a footer."""
    rows = [
        html_cell(f"GPU showback · {statement.month:%B %Y}" + ("" if statement.complete else " · month to date"),
                  f"{_TEXT}padding:20px 16px 0 16px;font-size:13px;line-height:18px;color:#656d76;")
    ]  # fmt: skip
    rows.append(
        html_cell(f"Team {statement.team}", f"{_TEXT}padding:4px 16px 8px 16px;font-size:22px;line-height:28px;"
                  "font-weight:600;")
    )  # fmt: skip
    rows.append(html_cell(statement.summary, f"{_TEXT}padding:0 16px 16px 16px;font-size:15px;line-height:22px;"))
    if statement.pending_hours:
        rows.append(
            html_cell(pending_note(statement), f"{_TEXT}padding:0 16px 16px 16px;font-size:14px;line-height:20px;"
                      "color:#9a6700;")
        )  # fmt: skip
    for section in statement.sections:
        rows.append(
            html_cell(section.title, f"{_TEXT}padding:12px 16px 6px 16px;font-size:17px;line-height:16px;"
                      f"font-weight:600;border-top:{BORDER};")
        )  # fmt: skip
        if section.note:
            rows.append(html_cell(section.note, f"{_TEXT}padding:0 16px 12px 16px;font-size:13px;line-height:19px;"))
        if len(section.rows) == 1 and section.total is None:
            rows.append(_facts(section, statement.currency))
        elif section.rows:
            rows.append(_table(section))
    link = statement_link(dashboard_url, statement)
    if link is not None:
        rows.append(f'<td style="padding:4px 16px 16px 16px;">{html_button("Open in gpu-finops", link)}</td>')
    footer = (
        f"Made by gpu-finops on {statement.made_at:%Y-%m-%d %H:%M} UTC from the ledger hours "
        f"{statement.start:%Y-%m-%d %H:%M} – {statement.end:%Y-%m-%d %H:%M} UTC. Amounts in {statement.currency}. "
        f"The attached {csv_filename(statement)} has every row."
    )
    return html_page(statement.title, rows, COLOUR, footer, margin_px=16)


def statement_email(statement: Statement, dashboard_url: str) -> Message:
    """The e-mail of the statement: its title, summary and facts, and as its document the text, the HTML and the
    CSV attachment."""
    link = statement_link(dashboard_url, statement)
    document = Document(
        text=statement_text(statement) + (f"\nOpen in gpu-finops: {link}\n" if link else ""),
        html=statement_html(statement, dashboard_url),
        attachments=(Attachment(csv_filename(statement), "text/csv", statement_csv(statement)),),
    )
    return Message(
        statement.title,
        statement.summary,
        list(statement.facts),
        None if link is None else ("Open in gpu-finops", link),
        "info",
        document=document,
    )


def statement_chat(statement: Statement, dashboard_url: str, emailed: bool) -> Message:
    """The chat summary of the statement: title, summary (saying where the whole statement went), the facts, the
    dashboard link."""
    where = "was e-mailed to the team's recipients" if emailed else "is in gpu-finops"
    summary = f"{statement.summary} The whole statement, with its top jobs, users and idle cost, {where}."
    link = statement_link(dashboard_url, statement)
    return Message(
        statement.title, summary, list(statement.facts), None if link is None else ("Open in gpu-finops", link), "info"
    )


def queue_statement(
    session: Session,
    config: AlertConfig,
    statement: Statement,
    now: datetime,
    *,
    dashboard_url: str,
    deadline: timedelta,
    actor: str,
) -> Queued:
    """Queue ``statement`` in the outbox for its team's route, unless a statement of that team and month was queued
    before (module docstring); in the caller's transaction. Audited as ``showback.queue`` by ``actor`` (after: team,
    month, route, deliveries) when queued.

    A route with no e-mail or Slack target queues nothing and records nothing (``queued`` False, no deliveries):
    once the route has a target, the next run queues the statement."""
    name, route = config.showback_route(statement.team)
    team_id = team_by_name(session, statement.team).id
    key = (team_id, statement.month)
    earlier = session.get(ShowbackStatement, key)
    if earlier is None and not (route.email or route.slack):
        return Queued(statement.team, statement.month, False, name, (), None)
    row = {"team_id": team_id, "month": statement.month, "queued_at": now, "route": name, "deliveries": []}
    if earlier is not None or not insert_unless_exists(session, ShowbackStatement.__table__, row):  # type: ignore[arg-type]
        earlier = session.get(ShowbackStatement, key, populate_existing=True)  # a concurrent run's, committed
        assert earlier is not None
        return Queued(
            statement.team, statement.month, False, earlier.route, tuple(earlier.deliveries), earlier.queued_at
        )
    ids: list[int] = []
    if route.email:
        email = message_to_payload(statement_email(statement, dashboard_url))
        ids += queue(session, [("email", ", ".join(route.email))], email, statement.title, None, now, deadline)
    if route.slack:
        chat = message_to_payload(statement_chat(statement, dashboard_url, bool(route.email)))
        ids += queue(session, [("slack", target) for target in route.slack], chat, statement.title, None, now, deadline)
    stored = session.get(ShowbackStatement, key)
    assert stored is not None
    stored.deliveries = ids
    after = {"team": statement.team, "month": f"{statement.month:%Y-%m}", "route": name, "deliveries": ids}
    audit.record(
        session, actor, "showback.queue", f"team {statement.team} month {statement.month:%Y-%m}", None, after, now
    )
    session.flush()
    return Queued(statement.team, statement.month, True, name, tuple(ids), now)


def _earlier(session: Session, team: str, team_id: int, month: datetime) -> Queued:
    """The statement of ``team`` for ``month`` queued before (by this run's transaction's start, or a concurrent run
    that has committed since)."""
    earlier = session.get(ShowbackStatement, (team_id, month), populate_existing=True)
    if earlier is None:
        raise LookupError(f"no statement of team {team} for {month:%Y-%m} was queued")
    return Queued(team, month, False, earlier.route, tuple(earlier.deliveries), earlier.queued_at)


def queued_teams(session: Session, month: datetime) -> set[str]:
    """The teams whose statement of ``month`` (its first instant) was queued."""
    query = select(Team.name).join(ShowbackStatement, ShowbackStatement.team_id == Team.id)
    return set(session.scalars(query.where(ShowbackStatement.month == month)))


class NotSettled(FinopsError):
    """A month's statements cannot be queued yet: the month has not ended, or ledger hours of it await a rollup."""


def queue_month(
    sessions: sessionmaker[Session],
    config: AlertConfig,
    month: datetime,
    now: datetime,
    *,
    dashboard_url: str,
    deadline: timedelta,
    idle_window_seconds: int,
    actor: str,
    teams: Sequence[str] | None = None,
    reasons: ReasonPolicy = ReasonPolicy(),  # noqa: B008 - frozen dataclass: a safe default
    efficiency: EfficiencyPolicy = EfficiencyPolicy(),  # noqa: B008 - frozen dataclass: a safe default
) -> list[Queued]:
    """Queue the statement of ``month`` (any instant in it) of every team that has one
    (:func:`finops.savings.showback.statement_teams`), or of ``teams``, whose statement is not queued yet; one
    transaction per team (:func:`queue_statement`), so a team that fails leaves the others queued. Returns what was
    done per team, the teams queued before included (not built again). ``reasons``: the waste reasons' thresholds of
    the statements' idle cost by reason (the ``FINOPS_WASTE_*`` settings); ``efficiency``: the SM activity bands and
    bottleneck rules of their efficiency sections (the ``FINOPS_EFFICIENCY_*`` settings).

    Raises :class:`NotSettled` when the month has not ended at ``now`` or ledger hours of it are pending a rollup
    (:func:`finops.db.hours.pending_hours`): nothing is queued then; :class:`finops.analysis.budgets.UnknownTeam` for
    a team of ``teams`` that is not known."""
    start, end, complete = statement_period(month, now)
    if not complete:
        raise NotSettled(
            f"month {start:%Y-%m} has not ended: its statements are sent from {next_month_start(start):%Y-%m-%d} on"
        )
    with sessions() as session:
        pending = pending_hours(session, start, end, now)
        if pending:
            raise NotSettled(
                f"{pending} ledger hour{'s' if pending != 1 else ''} of {start:%Y-%m} await a rollup "
                "(gpu-finops rollup): statements are sent from a settled ledger"
            )
        chosen = list(teams) if teams is not None else statement_teams(session, start, now)
        for team in chosen:
            check_known_team(session, team)
        done = queued_teams(session, start)
    results = []
    for team in chosen:
        if team in done:
            with sessions() as session:
                results.append(_earlier(session, team, team_by_name(session, team).id, start))
            continue
        # Read in a session of its own: on SQLite the idle cost by reason's work table opens a transaction, whose
        # snapshot a concurrent run's commit would leave stale (SQLITE_BUSY) by the time this one writes.
        with sessions() as session:
            statement = build_statement(
                session, team, start, now, idle_window_seconds=idle_window_seconds, reasons=reasons,
                efficiency=efficiency,
            )  # fmt: skip
        with sessions.begin() as session:
            results.append(
                queue_statement(
                    session, config, statement, now, dashboard_url=dashboard_url, deadline=deadline, actor=actor
                )
            )
    return results
