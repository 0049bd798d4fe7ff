"""``gpu-finops report`` (cost per team, job, user, node or GPU model over a period, from the hourly ledger,
with the month's budgets) and ``gpu-finops rollup`` (the scheduled ledger and idle work, run once)."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer

from finops.analysis.budgets import budget_status
from finops.analysis.report import (
    GROUP_BYS,
    cost_report,
    report_csv,
    report_dicts,
    report_table,
    unpriced_by_model,
)
from finops.cli.budget import budget_table
from finops.cli.context import idle_policy, instant, load_pricing, load_settings, open_sessions
from finops.ledger.rollup import unpriced_fix
from finops.service.scheduler import run_rollup
from finops.timeutil import utc_now

app = typer.Typer()


@app.command()
def rollup() -> None:
    """Run the scheduled work once: rebuild dirty ledger hours, re-judge recent idle episodes."""
    settings = load_settings()
    policy = idle_policy(settings)
    built, episodes = run_rollup(open_sessions(settings), load_pricing(settings), policy)
    typer.echo(
        f"{built.hours} ledger hours rebuilt: {built.priced_gpu_hours:,.2f} GPU-hours priced, "
        f"{built.unpriced_gpu_hours:,.2f} unpriced; {episodes} idle episodes"
    )
    for model, seconds in built.unpriced_gpu_seconds.items():
        typer.echo(f"unpriced: {seconds / 3600:,.2f} GPU-hours of {model}: {unpriced_fix(model)}", err=True)


@app.command()
def report(
    start: Annotated[str, typer.Option(help="Period start, ISO 8601 (UTC if no offset).")],
    end: Annotated[str, typer.Option(help="Period end (exclusive), ISO 8601.")],
    by: Annotated[str, typer.Option(help="team, job, user, node or gpu_model.")] = "team",
    output_format: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
    cluster: Annotated[
        str | None, typer.Option(help="Only jobs of this cluster, and the capacity no job held on its nodes.")
    ] = None,
    team: Annotated[
        str | None, typer.Option(help="Only the cost billed to this team (__unallocated__: capacity no job held).")
    ] = None,
    partition: Annotated[
        str | None, typer.Option(help="Only jobs of this partition, and the capacity no job held on its nodes.")
    ] = None,
) -> None:
    """Cost per team, job, user, node or GPU model over [start, end), from the hourly ledger; the table adds
    this month's budgets (only the team's with --team; a budget covers its team on every cluster and partition).

    --cluster, --team and --partition select the ledger rows as the dashboard's filters do (finops/analysis/filters.py),
    so the report equals the dashboard's for the same period and filters. GPU-hours whose model has no price are
    counted, never costed: the table's TOTAL line adds them by model, JSON and CSV have unpriced_gpu_hours per row
    (cost null when all its GPU-hours are unpriced), and a line on stderr per model says how to price them."""
    group = next((g for g in GROUP_BYS if g == by), None)
    if group is None:
        raise typer.BadParameter(f"must be one of {', '.join(GROUP_BYS)}", param_hint="--by")
    if output_format not in ("table", "json", "csv"):
        raise typer.BadParameter("must be table, json or csv", param_hint="--format")
    period = instant(start, "--start"), instant(end, "--end")
    with open_sessions(load_settings())() as session:
        rows = cost_report(session, *period, group, cluster=cluster, team=team, partition=partition)
        unpriced = unpriced_by_model(session, *period, cluster=cluster, team=team, partition=partition)
        statuses = budget_status(session, utc_now(), team=team) if output_format == "table" else []
    if output_format == "json":
        typer.echo(orjson.dumps(report_dicts(rows, group), option=orjson.OPT_INDENT_2).decode())
    elif output_format == "csv":
        typer.echo(report_csv(rows, group), nl=False)
    else:
        typer.echo(report_table(rows, group, unpriced))
        if statuses:
            scope = " (whole teams: all clusters and partitions)" if cluster or partition else ""
            typer.echo(f"\nBudgets, month to date{scope}:\n{budget_table(statuses)}")
    if output_format != "table":  # the table says it on its TOTAL line; JSON and CSV stay machine-readable
        for u in unpriced:
            typer.echo(f"unpriced: {u.gpu_hours:,.2f} GPU-hours of {u.model} (not in the costs): {u.fix}", err=True)
