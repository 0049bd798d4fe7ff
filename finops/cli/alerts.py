"""``gpu-finops alerts …``: list alerts, silence them, see and retry deliveries, send a test message, and run
the alert rules once. Changes (silences, retries) are audited as the OS user's (:mod:`finops.access.audit`)."""

from __future__ import annotations

import getpass
from typing import Annotated

import typer

from alerts.config import route_name
from alerts.engine import enqueue
from alerts.message import Message
from alerts.models import DELIVERY_STATUSES
from alerts.render import message_to_payload
from alerts.service import AlertRunner, AlertService
from alerts.store import (
    RETRIABLE,
    create_silence,
    expire_silence,
    list_alerts,
    list_deliveries,
    list_silences,
    retry_deliveries,
)
from finops.access import audit
from finops.cli.base import INCOMPLETE
from finops.cli.context import instant, load_settings, open_sessions
from finops.errors import FinopsError
from finops.timeutil import utc_now

app = typer.Typer(name="alerts", help="Alerts: rules, silences, deliveries to Slack and e-mail.", no_args_is_help=True)


@app.command("list")
def alerts_list(
    state: Annotated[str, typer.Option(help="firing, resolved or all.")] = "firing",
) -> None:
    """Alerts, newest first: state, rule, severity, labels, since when; muted ones are marked."""
    if state not in ("firing", "resolved", "all"):
        raise typer.BadParameter("must be firing, resolved or all", param_hint="--state")
    with open_sessions(load_settings())() as session:
        found = list_alerts(session, utc_now(), state)  # type: ignore[arg-type]
    if not found:
        typer.echo(f"no {state} alerts" if state != "all" else "no alerts")
        return
    for a in found:
        labels = ", ".join(f'{k}="{v}"' for k, v in sorted(a.labels.items()) if k not in ("rule", "severity"))
        ended = f" until {a.ends_at:%Y-%m-%d %H:%M}" if a.state == "resolved" and a.ends_at else ""
        muted = " (muted)" if a.muted else ""
        typer.echo(
            f"{a.fingerprint}  {a.state:<8} {a.severity:<8} {a.rule:<16} since {a.starts_at:%Y-%m-%d %H:%M}"
            f"{ended}{muted}  {{{labels}}}\n    {a.summary}"
        )


@app.command("silence")
def alerts_silence(
    matcher: Annotated[list[str], typer.Option(help='Label matcher, e.g. team="vision" (repeatable; all must match).')],
    until: Annotated[str, typer.Option(help="End of the silence, ISO 8601 (UTC if no offset).")],
    comment: Annotated[str, typer.Option(help="Why (shown with the silence).")],
    start: Annotated[str | None, typer.Option("--from", help="Start, ISO 8601 (default: now).")] = None,
    author: Annotated[str, typer.Option(help="Who silences (default: $USER).")] = "",
) -> None:
    """Mute the alerts matching every --matcher until --until (Alertmanager matcher syntax: = != =~ !~)."""
    ends = instant(until, "--until")
    starts = instant(start, "--from") if start is not None else None
    sessions = open_sessions(load_settings())
    try:
        with sessions.begin() as session:
            silence_id = create_silence(
                session, matcher, ends, utc_now(), starts_at=starts, created_by=author or getpass.getuser(),
                comment=comment, actor=audit.os_user_actor(),
            )  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--matcher/--until") from exc
    typer.echo(f"silence {silence_id}: {' '.join(matcher)} until {ends.isoformat()}")


@app.command("silences")
def alerts_silences(
    include_expired: Annotated[bool, typer.Option("--all", help="Include silences that have ended.")] = False,
) -> None:
    """Silences still in force (or, with --all, every one)."""
    with open_sessions(load_settings())() as session:
        found = list_silences(session, utc_now(), include_expired=include_expired)
    if not found:
        typer.echo("no silences")
    for s in found:
        state = "active" if s.active else "ended" if s.ends_at <= utc_now() else "pending"
        typer.echo(
            f"{s.id:>5}  {state:<7} {s.starts_at:%Y-%m-%d %H:%M} → {s.ends_at:%Y-%m-%d %H:%M}  "
            f"{' '.join(s.matchers)}  ({s.created_by}: {s.comment})"
        )


@app.command("expire")
def alerts_expire(silence_id: Annotated[int, typer.Argument(help="The silence's id.")]) -> None:
    """End a silence now; exit code 2 when no silence of that id is in force."""
    with open_sessions(load_settings()).begin() as session:
        ended = expire_silence(session, silence_id, utc_now(), actor=audit.os_user_actor())
    if not ended:
        raise FinopsError(f"no silence {silence_id} in force")
    typer.echo(f"silence {silence_id} expired")


@app.command("deliveries")
def alerts_deliveries(
    status: Annotated[
        list[str] | None,
        typer.Option(help="pending, delivered, failed or refused (repeatable; default failed, refused)."),
    ] = None,
) -> None:
    """Messages in the outbox with their status, attempts and last (redacted) error; failed ones by default."""
    chosen = status or list(RETRIABLE)
    for value in chosen:
        if value not in DELIVERY_STATUSES:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(DELIVERY_STATUSES)}", param_hint="--status")
    with open_sessions(load_settings())() as session:
        found = list_deliveries(session, chosen)
    if not found:
        typer.echo(f"no {' or '.join(chosen)} deliveries")
    for d in found:
        typer.echo(
            f"{d.id:>6}  {d.status:<9} {d.channel:<5} {d.target:<30} attempts {d.attempts}  "
            f"queued {d.created_at:%Y-%m-%d %H:%M:%S}  {d.title}"
            + (f"\n        last error: {d.last_error}" if d.last_error else "")
        )


@app.command("retry")
def alerts_retry(
    delivery_id: Annotated[list[int] | None, typer.Argument(help="Ids of failed or refused deliveries.")] = None,
    all_failed: Annotated[bool, typer.Option("--all-failed", help="Every failed or refused delivery.")] = False,
) -> None:
    """Queue failed or refused deliveries again (the running service sends them within seconds).
    Exit code 1 when some of the ids given are not failed or refused deliveries (the others are queued)."""
    if bool(delivery_id) == all_failed:
        raise typer.BadParameter("give delivery ids or --all-failed (one of the two)", param_hint="ID")
    settings = load_settings()
    sessions = open_sessions(settings)
    deadline = AlertService.from_settings(settings).deadline
    with sessions.begin() as session:
        ids = None if all_failed else delivery_id
        retried = retry_deliveries(session, utc_now(), deadline, ids, actor=audit.os_user_actor())
    typer.echo(f"queued again: {', '.join(map(str, retried)) or 'nothing'}")
    missed = sorted(set(delivery_id or []) - set(retried))
    if missed:
        typer.echo(f"error: not failed or refused: {', '.join(map(str, missed))}", err=True)
        raise typer.Exit(INCOMPLETE)


@app.command("test")
def alerts_test(
    channel: Annotated[str, typer.Option(help="slack or email.")],
    route: Annotated[str, typer.Option(help="Route whose targets get the message (default: the default route).")] = (
        "default"
    ),
) -> None:
    """Send a test message to a route's Slack webhooks or e-mail recipients, through the outbox, once.
    Exit code 1 when a delivery fails; 2 for an unknown route or one without a target of that channel."""
    if channel not in ("slack", "email"):
        raise typer.BadParameter("must be slack or email", param_hint="--channel")
    settings = load_settings()
    sessions = open_sessions(settings)
    service = AlertService.from_settings(settings)
    names = ["default", *(route_name(r, i) for i, r in enumerate(service.config.routes))]
    if route not in names:
        raise FinopsError(f"no route named {route!r} (routes: {', '.join(names)})")
    chosen = service.config.route_named(route)
    targets = chosen.model_copy(update={"email": []} if channel == "slack" else {"slack": []})
    if not (targets.slack or targets.email):
        raise FinopsError(f"route {route!r} has no {channel} target in the rules file")
    now = utc_now()
    message = Message(
        title="[TEST] gpu-finops alert delivery",
        summary=f"A test message from gpu-finops: alerts routed to {route!r} reach this {channel} target.",
        fields=[("Route", route), ("Channel", channel), ("Sent at", f"{now:%Y-%m-%d %H:%M:%S} UTC")],
        link=("Open in gpu-finops", service.dashboard_url),
        severity="info",
    )
    with sessions.begin() as session:
        ids = enqueue(session, targets, message_to_payload(message), None, now, service.deadline)
    runner = AlertRunner(service, sessions)
    try:
        outcomes = runner.worker.run_once(ids)
    finally:
        runner.close()
    for outcome in outcomes:
        detail = f": {outcome.reason}" if outcome.reason else ""
        typer.echo(f"delivery {outcome.id} ({outcome.channel} → {outcome.target}): {outcome.status}{detail}")
    if any(o.status != "delivered" for o in outcomes):
        raise typer.Exit(INCOMPLETE)


@app.command("evaluate")
def alerts_evaluate() -> None:
    """Run the alert rules now, then dispatch and deliver what is due (what the scheduler does after a rollup)."""
    settings = load_settings()
    sessions = open_sessions(settings)
    runner = AlertRunner(AlertService.from_settings(settings), sessions)
    try:
        evaluation = runner.evaluate()
        dispatched, outcomes = runner.deliver()
    finally:
        runner.close()
    delivered = sum(1 for o in outcomes if o.status == "delivered")
    typer.echo(
        f"{evaluation.firing} alerts firing ({evaluation.started} new, {evaluation.resolved} resolved, "
        f"{evaluation.events} events taken); {dispatched.notifications} notifications queued; "
        f"{delivered} of {len(outcomes)} deliveries sent"
    )
