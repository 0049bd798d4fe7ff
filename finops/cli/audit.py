"""``gpu-finops audit list``: the audit log of changes (:mod:`finops.access.audit`), newest first, as a table or
JSON (JSON as ``GET /api/v1/audit`` gives it)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import orjson
import typer

from finops.access.audit import DEFAULT_LIMIT, MAX_LIMIT, AuditView, list_entries
from finops.cli.context import bound, load_settings, open_sessions
from finops.errors import FinopsError

app = typer.Typer(name="audit", help="The audit log: who changed what, when, before → after.", no_args_is_help=True)

FORMATS = ("table", "json")


@app.command("list")
def audit_list(
    since: Annotated[
        str | None, typer.Option(help="From this instant on: a month (2026-11), a day (2026-11-24) or ISO 8601.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Before this instant (a month or a day: through its end), as --since.")
    ] = None,
    actor: Annotated[
        str | None, typer.Option(help="Only this actor's changes: os-user:LOGIN, api-token:ID, system:demo.")
    ] = None,
    action: Annotated[str | None, typer.Option(help="Only this action, e.g. budget.set, node_token.revoke.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIMIT, help="At most this many entries.")] = DEFAULT_LIMIT,
    output_format: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
) -> None:
    """Changes made through the command line or the REST API, newest first: when (UTC), who, what, to what, and the
    state before → after. A bad --since or --until is one error line and exit code 2."""
    if output_format not in FORMATS:
        raise typer.BadParameter(f"must be one of {', '.join(FORMATS)}", param_hint="--format")
    start = _bound(since, "--since", end=False)
    end = _bound(until, "--until", end=True)
    with open_sessions(load_settings())() as session:
        entries = list_entries(session, start, end, actor=actor, action=action, limit=limit)
    if output_format == "json":
        typer.echo(orjson.dumps([e.as_dict() for e in entries], option=orjson.OPT_INDENT_2).decode())
    else:
        typer.echo(audit_table(entries) if entries else "no audit entries")


def _bound(text: str | None, option: str, *, end: bool) -> datetime | None:
    """``text`` as a bound of the listed period (:func:`finops.cli.context.bound`), None when not given; FinopsError
    (one ``error:`` line, exit code 2) when it is no time."""
    if text is None:
        return None
    try:
        return bound(text, option, end=end)
    except typer.BadParameter as exc:
        raise FinopsError(f"{option}: {exc.message}") from exc


def audit_table(entries: list[AuditView]) -> str:
    """One line per entry (when, actor, action, subject), then, indented, its state before → after as compact JSON
    (``-`` for none)."""
    lines = [f"{'at (UTC)':<20} {'actor':<28} {'action':<20} subject"]
    for e in entries:
        lines.append(f"{e.at:%Y-%m-%dT%H:%M:%SZ} {e.actor:<28} {e.action:<20} {e.subject}")
        lines.append(f"    {_compact(e.before)} → {_compact(e.after)}")
    return "\n".join(lines)


def _compact(state: dict[str, object] | None) -> str:
    """``state`` as one line of JSON, ``-`` for None."""
    return "-" if state is None else orjson.dumps(state).decode()
