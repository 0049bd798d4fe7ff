"""``gpu-finops team …``: teams and the rules that give jobs their team (Slurm account, Kubernetes namespace,
Kubernetes label → team). Commands that move jobs roll up the ledger hours they touched before they return
(``--no-rollup``: leave them pending). Changes are audited as the OS user's (:mod:`finops.access.audit`)."""

from __future__ import annotations

from typing import Annotated

import typer

from finops.access import audit
from finops.cli.context import NoRollup, load_settings, open_sessions, roll_up_unless
from finops.db.models import TEAM_RULE_PRECEDENCES
from finops.errors import FinopsError
from finops.jobs.teams import (
    delete_rule,
    find_rule,
    list_rules,
    map_account,
    precedence,
    rule_subject,
    set_precedence,
    set_rule,
)

app = typer.Typer(name="team", help="Teams and the rules that give jobs their team.", no_args_is_help=True)
rule_app = typer.Typer(
    help="Team rules: a Slurm account, Kubernetes namespace or Kubernetes label key=value → team; a job takes the "
    "team of its first matching rule in the site's precedence (default: namespace, account, then a pod's labels), "
    "else __unmapped__.",
    no_args_is_help=True,
)
app.add_typer(rule_app, name="rule")

_RULE_KIND = typer.Option("--kind", help="account, namespace or label.")
_RULE_KEY = typer.Option("--key", help="The label name, for --kind label (e.g. team).")


@app.command("map")
def team_map(account: str, team: str, no_rollup: NoRollup = False) -> None:
    """Map Slurm ACCOUNT to TEAM (jobs already imported move too)."""
    settings = load_settings()
    with open_sessions(settings).begin() as session:
        moved = map_account(session, account, team, actor=audit.os_user_actor())
    typer.echo(f"account {account} → team {team}; {moved} jobs moved")
    roll_up_unless(no_rollup, settings)


@rule_app.command("set")
def team_rule_set(
    value: Annotated[str, typer.Argument(help="Account name, namespace, or label value.")],
    team: Annotated[str, typer.Argument(help="Team name (created if new).")],
    kind: Annotated[str, _RULE_KIND],
    key: Annotated[str, _RULE_KEY] = "",
    no_rollup: NoRollup = False,
) -> None:
    """Map VALUE (of the given kind) to TEAM, replacing the rule for the same selector; jobs already imported move."""
    settings = load_settings()
    with open_sessions(settings).begin() as session:
        try:
            moved = set_rule(session, kind, key, value, team, actor=audit.os_user_actor())
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--kind/--key") from exc
    typer.echo(f"{rule_subject(kind, key, value)} → team {team}; {moved} jobs moved")
    roll_up_unless(no_rollup, settings)


@rule_app.command("delete")
def team_rule_delete(
    value: Annotated[str, typer.Argument(help="Account name, namespace, or label value.")],
    kind: Annotated[str, _RULE_KIND],
    key: Annotated[str, _RULE_KEY] = "",
    no_rollup: NoRollup = False,
) -> None:
    """Delete the rule for VALUE (of the given kind); the jobs it decided take their next matching rule.
    Exit code 2 when there is no such rule."""
    settings = load_settings()
    with open_sessions(settings).begin() as session:
        try:
            rule = find_rule(session, kind, key, value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--kind/--key") from exc
        if rule is None:
            raise FinopsError(f"no rule for {rule_subject(kind, key, value)}")
        moved = delete_rule(session, kind, key, value, actor=audit.os_user_actor())
    typer.echo(f"deleted {rule_subject(kind, key, value)} → team {rule.team}; {moved} jobs moved")
    roll_up_unless(no_rollup, settings)


@rule_app.command("precedence")
def team_rule_precedence(
    name: Annotated[str | None, typer.Argument(help="namespace or label; none: show the one in force.")] = None,
    no_rollup: NoRollup = False,
) -> None:
    """Show or set the order rules are tried in. namespace (default): namespace, account, then a pod's labels, so
    a pod's own labels never override the rule of its namespace; label: labels first (only where trusted pipelines
    alone label pods). Setting it moves the jobs it decides."""
    settings = load_settings()
    with open_sessions(settings).begin() as session:
        if name is None:
            name = precedence(session)
            typer.echo(f"{name}: {', '.join(TEAM_RULE_PRECEDENCES[name])}")
            return
        try:
            moved = set_precedence(session, name, actor=audit.os_user_actor())
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="NAME") from exc
    typer.echo(f"team rule precedence {name}: {', '.join(TEAM_RULE_PRECEDENCES[name])}; {moved} jobs moved")
    roll_up_unless(no_rollup, settings)


@rule_app.command("list")
def team_rule_list() -> None:
    """Every team rule, in the order they are tried (the site's precedence, see `team rule precedence`)."""
    with open_sessions(load_settings())() as session:
        rules = list_rules(session)
        order = TEAM_RULE_PRECEDENCES[precedence(session)]
    lines = [f"precedence: {', '.join(order)}", f"{'kind':<10} {'key':<24} {'value':<32} team"]
    lines += [f"{r.kind:<10} {r.key or '-':<24} {r.value:<32} {r.team}" for r in rules]
    typer.echo("\n".join(lines))
