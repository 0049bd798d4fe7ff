"""``gpu-finops api-token``: REST API credentials with roles (:mod:`finops.access.api_tokens`)."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy import select

from finops.access.api_tokens import ROLES, create_token, list_tokens, revoke_token
from finops.access.audit import os_user_actor
from finops.access.tokens import parse_lifetime
from finops.cli.context import TOKEN_COLUMNS, load_settings, open_sessions, token_columns, utc_stamp
from finops.db.models import Team
from finops.timeutil import utc_now

app = typer.Typer(
    name="api-token",
    help="REST API tokens: viewer reads everything, team reads one team's data, admin also changes things.",
    no_args_is_help=True,
)


@app.command("create")
def api_token_create(
    role: Annotated[str, typer.Option(help=f"One of {', '.join(ROLES)}.")],
    team: Annotated[str | None, typer.Option(help="The team a team-role token reads (team role only).")] = None,
    name: Annotated[str, typer.Option(help="Whose it is, for list (e.g. grafana, alice).")] = "",
    expires: Annotated[
        str | None, typer.Option(help="Valid for this long (90d, 12h, 2w; s m h d w); default: until revoked.")
    ] = None,
) -> None:
    """Make an API token and print it once, alone on the last line (only its SHA-256 is stored: it cannot be shown
    again). Send it as `Authorization: Bearer <token>`. A --team no job, rule or budget names yet is said on stderr
    (a typo would give a token that sees nothing)."""
    expires_in = parse_lifetime(expires) if expires is not None else None
    with open_sessions(load_settings()).begin() as session:
        row, token = create_token(
            session, role, utc_now(), team=team, name=name, expires_in=expires_in, actor=os_user_actor()
        )
        known = row.team is None or session.scalar(select(Team.id).where(Team.name == row.team)) is not None
    if not known:
        typer.echo(f"note: no team {row.team!r} yet (no job, rule or budget names it): check the name", err=True)
    typer.echo(
        f"id       {row.id}\nrole     {row.role}\nteam     {row.team or '-'}\nname     {row.name or '-'}\n"
        f"expires  {utc_stamp(row.expires_at, 'never')}"
    )
    typer.echo(token)


@app.command("list")
def api_token_list() -> None:
    """Every API token (never its secret): id, role, team, name, state (live, expired, revoked), created, expires,
    last used (to the minute) and revoked, in UTC."""
    now = utc_now()
    with open_sessions(load_settings())() as session:
        rows = list_tokens(session)
    lines = [f"{'id':<16} {'role':<6} {'team':<16} {'name':<16} {TOKEN_COLUMNS}"]
    lines += [
        f"{row.id:<16} {row.role:<6} {row.team or '-':<16} {row.name or '-':<16} {token_columns(row, now)}"
        for row in rows
    ]
    typer.echo("\n".join(lines))


@app.command("revoke")
def api_token_revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (from list).")],
) -> None:
    """Revoke an API token now: the service refuses it (401) from its next request on. Revoking a revoked token
    changes nothing."""
    with open_sessions(load_settings()).begin() as session:
        row, revoked = revoke_token(session, token_id, utc_now(), actor=os_user_actor())
    if revoked:
        typer.echo(f"revoked API token {row.id} ({row.role})")
    else:
        typer.echo(f"API token {row.id} was already revoked at {utc_stamp(row.revoked_at)}")
