"""``gpu-finops nudges``: the per-user messages about wasteful jobs (:mod:`alerts.nudges`), sent now or, with
``--dry-run``, printed as they would be sent."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy.orm import Session, sessionmaker

from alerts.delivery import Outcome
from alerts.nudges import NudgeService, Planned, plan_nudges, send_nudges
from alerts.service import AlertRunner, AlertService
from finops.cli.base import INCOMPLETE
from finops.cli.context import load_settings, open_sessions
from finops.settings.combined import Settings
from finops.timeutil import utc_now

app = typer.Typer()


@app.command()
def nudges(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the messages that would be sent; send and record nothing.")
    ] = False,
    user: Annotated[str | None, typer.Option(help="Only this user's nudges (a Slurm user name).")] = None,
) -> None:
    """Find the nudges due now (idle running jobs, GPU-hours at 0 %, low GPU efficiency, MIG candidates), then queue
    and deliver each due one to its user's addresses, or with --dry-run print it. A user is sent each kind at most
    once every FINOPS_NUDGE_REPEAT_DAYS; those sent lately are listed as held back, those with no address as such.
    Exit code 1 when a delivery was not delivered (failed, refused, or left for a retry by the running service)."""
    settings = load_settings()
    sessions = open_sessions(settings)
    service = NudgeService.from_settings(settings)
    now = utc_now()
    if dry_run:
        with sessions() as session:
            planned = plan_nudges(session, service, now, user=user)
    else:
        with sessions.begin() as session:
            planned = send_nudges(session, service, now, user=user)
    for item in planned:
        typer.echo(_status_line(item, service))
        if item.status in ("due", "sent"):
            typer.echo("    " + item.message.plain_text().rstrip().replace("\n", "\n    "))
    counts = {s: sum(1 for p in planned if p.status == s) for s in ("due", "sent", "suppressed", "no-address")}
    typer.echo(
        f"{len(planned)} nudges: {counts['sent'] if not dry_run else counts['due']} "
        f"{'to send' if dry_run else 'queued'}, {counts['suppressed']} held back, {counts['no-address']} without an "
        "address"
    )
    if dry_run:
        return
    outcomes = _deliver(settings, sessions, [i for p in planned for i in p.deliveries])
    for outcome in outcomes:
        detail = f": {outcome.reason}" if outcome.reason else ""
        typer.echo(f"delivery {outcome.id} ({outcome.channel} → {outcome.target}): {outcome.status}{detail}")
    if any(o.status != "delivered" for o in outcomes):
        raise typer.Exit(INCOMPLETE)


def _status_line(item: Planned, service: NudgeService) -> str:
    """One line per nudge: user, kind, and where it goes or why it does not."""
    head = f"{item.nudge.user}  {item.nudge.kind}  "
    if item.status == "no-address":
        return head + f"no address: set FINOPS_NUDGE_EMAIL_DOMAIN or add {item.nudge.user} to FINOPS_NUDGE_RECIPIENTS"
    if item.status == "suppressed" and item.last_sent is not None:
        again = item.last_sent + service.repeat
        return head + f"held back: sent {item.last_sent:%Y-%m-%d %H:%M} UTC, again from {again:%Y-%m-%d %H:%M} UTC"
    if item.status == "suppressed":
        return head + "held back: sent by another pass just now"
    targets = ", ".join(f"{channel} {target}" for channel, target in item.targets)
    return head + ("would go to " if item.status == "due" else "queued for ") + targets


def _deliver(settings: Settings, sessions: sessionmaker[Session], ids: list[int]) -> list[Outcome]:
    """Send the outbox rows ``ids`` now, each once (a row left for a retry is sent later by the service)."""
    if not ids:
        return []
    runner = AlertRunner(AlertService.from_settings(settings), sessions)
    outcomes: list[Outcome] = []
    try:
        while batch := runner.worker.run_once(ids):
            outcomes += batch
    finally:
        runner.close()
    return outcomes
