"""``gpu-finops showback``: a team's monthly statement (spend against budget, top jobs and users, idle cost,
efficiency, right-sizing savings) printed, written as the e-mail's HTML or CSV, or sent through the alerts outbox as the
scheduler sends it on the first of each month (:mod:`alerts.showback`)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy.orm import Session, sessionmaker

from alerts.service import AlertRunner, AlertService
from alerts.showback import statement_html
from finops.access import audit
from finops.analysis.budgets import parse_month
from finops.cli.base import INCOMPLETE
from finops.cli.context import load_settings, open_sessions
from finops.savings.showback import build_statement, statement_teams
from finops.savings.showback_render import statement_csv, statement_text
from finops.settings.combined import Settings
from finops.timeutil import previous_month_start, utc_now

app = typer.Typer()


@app.command()
def showback(
    month: Annotated[str | None, typer.Option(help="Month as YYYY-MM (default: the previous month, UTC).")] = None,
    team: Annotated[
        str | None, typer.Option(help="Only this team (default: every team with GPU time or a budget).")
    ] = (None),
    send: Annotated[
        bool, typer.Option("--send", help="Queue the statements in the alerts outbox and deliver them now.")
    ] = False,
    html: Annotated[Path | None, typer.Option(help="Write the team's statement as the e-mail's HTML to this file.")] = (
        None
    ),
    csv: Annotated[Path | None, typer.Option(help="Write the team's statement as the e-mail's CSV to this file.")] = (
        None
    ),
) -> None:
    """The monthly showback statement of each team, or of --team: spend against budget, top jobs and users, idle cost
    by reason, efficiency (SM activity, busy-but-inefficient jobs), right-sizing savings. Printed as text by default;
    --html and --csv write the e-mail's HTML and CSV attachment of one --team; a month not ended yet is shown to
    date.

    --send queues each team's statement for its alert route (e-mail: the whole statement with the CSV; Slack: a
    summary) and delivers it now, once per team and month: a statement queued before, by the scheduler or by hand,
    is not sent again (a failed delivery is retried with gpu-finops alerts retry). A month is sent once it has
    ended and its ledger hours are rolled up. Exit code 1 when a delivery fails."""
    if (html is not None) + (csv is not None) + send > 1:
        raise typer.BadParameter("give one of --send, --html and --csv", param_hint="--send/--html/--csv")
    if (html is not None or csv is not None) and team is None:
        raise typer.BadParameter("--html and --csv write one team's statement: give --team", param_hint="--team")
    now = utc_now()
    first = parse_month(month) if month is not None else previous_month_start(now)
    settings = load_settings()
    sessions = open_sessions(settings)
    if send:
        _send(settings, sessions, first, team)
        return
    with sessions() as session:
        teams = [team] if team is not None else statement_teams(session, first, now)
        window, reasons, efficiency = settings.idle_window_seconds, settings.reason_policy, settings.efficiency_policy
        statements = [
            build_statement(
                session, name, first, now, idle_window_seconds=window, reasons=reasons, efficiency=efficiency
            )
            for name in teams
        ]
    if html is not None:
        html.write_text(statement_html(statements[0], settings.alert_dashboard_url), encoding="utf-8")
        typer.echo(f"wrote {html}")
    elif csv is not None:
        csv.write_text(statement_csv(statements[0]), encoding="utf-8")
        typer.echo(f"wrote {csv}")
    elif not statements:
        typer.echo(f"no team had GPU time or a budget in {first:%Y-%m}")
    else:
        typer.echo("\n\n".join(statement_text(statement) for statement in statements), nl=False)


def _send(settings: Settings, sessions: sessionmaker[Session], month: datetime, team: str | None) -> None:
    """Queue the month's statements (of ``team`` only, if given) and deliver what was queued now."""
    runner = AlertRunner(AlertService.from_settings(settings), sessions)
    try:
        done = runner.showback(month, None if team is None else [team], actor=audit.os_user_actor())
        fresh = [i for q in done if q.queued for i in q.deliveries]
        outcomes = {o.id: o for o in runner.worker.run_once(fresh, limit=max(len(fresh), 1))} if fresh else {}
    finally:
        runner.close()
    if not done:
        typer.echo(f"no team had GPU time or a budget in {month:%Y-%m}")
    for queued in done:
        if queued.queued:
            for delivery in queued.deliveries:
                outcome = outcomes.get(delivery)
                state = (
                    "queued" if outcome is None else outcome.status + (f": {outcome.reason}" if outcome.reason else "")
                )
                where = "" if outcome is None else f" ({outcome.channel} → {outcome.target})"
                typer.echo(f"team {queued.team}: delivery {delivery}{where}: {state}")
        elif queued.queued_at is not None:
            ids = ", ".join(map(str, queued.deliveries))
            typer.echo(
                f"team {queued.team}: already queued on {queued.queued_at:%Y-%m-%d %H:%M} UTC through route "
                f"{queued.route} (deliveries {ids}); not sent again"
            )
        else:
            typer.echo(f"team {queued.team}: route {queued.route} has no e-mail or Slack target; nothing sent")
    if any(o.status != "delivered" for o in outcomes.values()):
        raise typer.Exit(INCOMPLETE)
