"""``gpu-finops budget …``: monthly team budgets (set one, see every team's month-to-date spend and forecast),
and the budget table ``gpu-finops report`` prints too."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated

import typer

from finops.analysis.budgets import BudgetStatus, budget_status, set_budget
from finops.cli.context import instant, load_pricing, load_settings, open_sessions
from finops.timeutil import utc_now

app = typer.Typer(name="budget", help="Monthly team budgets.", no_args_is_help=True)


@app.command("set")
def budget_set(
    team: str,
    amount: str,
    month: Annotated[str | None, typer.Option(help="Month as YYYY-MM (default: this month, UTC).")] = None,
) -> None:
    """Set TEAM's budget for a month to AMOUNT (in the price catalog's currency)."""
    try:
        value = Decimal(amount)
    except InvalidOperation as exc:
        raise typer.BadParameter(f"{amount!r} is not a decimal amount", param_hint="AMOUNT") from exc
    if not value.is_finite() or value < 0:
        raise typer.BadParameter(f"{amount!r} is not an amount ≥ 0", param_hint="AMOUNT")
    at = instant(f"{month}-01T00:00:00+00:00", "--month") if month else utc_now()
    settings = load_settings()
    currency = load_pricing(settings).catalog.currency
    with open_sessions(settings).begin() as session:
        budget = set_budget(session, team, value, at, currency)
    typer.echo(f"budget of {team} for {budget.month:%Y-%m}: {budget.amount:.2f} {currency}")


@app.command("status")
def budget_status_command() -> None:
    """Month-to-date spend, % of budget and run-rate forecast for every team with a budget."""
    with open_sessions(load_settings())() as session:
        statuses = budget_status(session, utc_now())
    typer.echo(budget_table(statuses))


def budget_table(statuses: list[BudgetStatus]) -> str:
    """One line per team: budget, spend month to date, % used, forecast month-end spend (currency amounts)."""
    lines = [f"{'team':<16} {'budget':>14} {'spent MTD':>14} {'used %':>7} {'forecast':>14}"]
    for s in statuses:
        lines.append(f"{s.team:<16} {s.budget:>14,.2f} {s.spent:>14,.2f} {s.used_percent:>7} {s.forecast:>14,.2f}")
    return "\n".join(lines)
