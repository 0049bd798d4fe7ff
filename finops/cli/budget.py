"""``gpu-finops budget …``: monthly team budgets (set or delete one, see every team's month-to-date spend and
forecast), and the budget table ``gpu-finops report`` prints too. Budgets are checked by
:func:`finops.analysis.budgets.set_budget`, as for the REST API: an error is one ``error: …`` line and exit code 2.
Changes are audited as the OS user's (:mod:`finops.access.audit`)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from finops.access import audit
from finops.analysis.budgets import BudgetStatus, UnknownTeam, budget_status, delete_budget, parse_month, set_budget
from finops.cli.context import load_pricing, load_settings, open_sessions
from finops.errors import FinopsError
from finops.timeutil import utc_now

app = typer.Typer(name="budget", help="Monthly team budgets.", no_args_is_help=True)

_PROJECT = typer.Option(help="Only this project of the team (a job's project); default: the whole team.")


@app.command("set")
def budget_set(
    team: str,
    amount: Annotated[str, typer.Argument(help="Decimal amount > 0, in the price catalog's currency.")],
    month: Annotated[str | None, typer.Option(help="Month as YYYY-MM (default: this month, UTC).")] = None,
    project: Annotated[str, _PROJECT] = "",
    currency: Annotated[
        str | None, typer.Option(help="ISO 4217 code of AMOUNT; must be the price catalog's (default: it).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Set it even if TEAM has no jobs or rules yet.")] = False,
) -> None:
    """Set TEAM's budget (or its --project's) for a month to AMOUNT, replacing any.

    AMOUNT is in the currency of the price catalog in force (budgets are not converted; another --currency is
    refused). A TEAM without jobs, rules, ledger hours or budgets yet is named with the known teams and needs a
    confirmation, or --yes; without a terminal to ask on, exit code 2."""
    settings = load_settings()
    catalog = load_pricing(settings).catalog
    first = parse_month(month) if month is not None else utc_now()
    sessions = open_sessions(settings)

    def write(allow_unknown_team: bool) -> tuple[str, str]:
        with sessions.begin() as session:
            budget = set_budget(
                session,
                team,
                amount,
                first,
                currency,
                project,
                catalog=catalog,
                allow_unknown_team=allow_unknown_team,
                actor=audit.os_user_actor(),
            )
            return f"{budget.month:%Y-%m}", f"{budget.amount:,.2f} {budget.currency}"

    try:
        when, figure = write(yes)
    except UnknownTeam as exc:
        if not sys.stdin.isatty():
            raise FinopsError(f"{exc}; pass --yes to set its budget anyway") from exc
        typer.echo(f"warning: {exc}", err=True)
        typer.confirm(f"Set a budget for team {team} anyway?", abort=True)
        when, figure = write(True)
    typer.echo(f"budget of {_label(team, project)} for {when}: {figure}")


@app.command("delete")
def budget_delete(
    team: str,
    month: Annotated[str, typer.Argument(help="Month as YYYY-MM.")],
    project: Annotated[str, _PROJECT] = "",
) -> None:
    """Delete TEAM's budget (or its --project's) for MONTH. Exit code 2 when there is none."""
    first = parse_month(month)
    with open_sessions(load_settings()).begin() as session:
        if not delete_budget(session, team, first, project, actor=audit.os_user_actor()):
            raise FinopsError(f"no budget for {_label(team, project)} in {first:%Y-%m}")
    typer.echo(f"deleted the budget of {_label(team, project)} for {first:%Y-%m}")


@app.command("status")
def budget_status_command() -> None:
    """Month-to-date spend, % of budget and run-rate forecast for every team with a budget."""
    with open_sessions(load_settings())() as session:
        statuses = budget_status(session, utc_now())
    typer.echo(budget_table(statuses))


def _label(team: str, project: str) -> str:
    return f"team {team}" if not project else f"team {team} project {project}"


def budget_table(statuses: list[BudgetStatus]) -> str:
    """One line per budget (team, or ``team/project``): budget, spend month to date (the cents of the cost report
    by team over the month so far), % used, forecast month-end spend, currency; then a line per budget that is not
    comparable with its spend (another currency) saying so and how to fix it."""
    lines = [f"{'team':<16} {'budget':>14} {'spent MTD':>14} {'used %':>7} {'forecast':>14}  currency"]
    notes = []
    for s in statuses:
        name = f"{s.team}/{s.project}" if s.project else s.team
        used = s.used_percent if s.comparable else "n/a"
        currency = s.currency if s.comparable else f"{s.currency} (spend in {s.spend_currency})"
        lines.append(f"{name:<16} {s.budget:>14,.2f} {s.spent:>14,.2f} {used:>7} {s.forecast:>14,.2f}  {currency}")
        if s.problem is not None:
            notes.append(
                f"{name} {s.month:%Y-%m}: {s.problem} (gpu-finops budget set {s.team} AMOUNT --month {s.month:%Y-%m}"
                f"{f' --project {s.project}' if s.project else ''})"
            )
    return "\n".join(lines + notes)
