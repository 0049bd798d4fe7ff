"""``gpu-finops report`` (cost per team, job, user, node or GPU model over a period, from the hourly ledger,
with the month's budgets; or idle cost by waste reason) and ``gpu-finops rollup`` (the scheduled ledger and idle
work, run once)."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer

from finops.analysis.budgets import budget_status
from finops.analysis.price_estimates import estimated_prices
from finops.analysis.report import GROUP_BYS, cost_report, unpriced_by_model
from finops.analysis.report_format import report_csv, report_dicts, report_table
from finops.cli.budget import budget_table
from finops.cli.context import PeriodEnd, PeriodStart, load_pricing, load_settings, open_sessions, period, roll_up
from finops.db.hours import StaleLedger, pending_hours, stale_ledger
from finops.pricing.store import pricing_in_force
from finops.savings.efficiency import efficiency_report
from finops.savings.efficiency_report import efficiency_csv, efficiency_dict, efficiency_table
from finops.savings.waste_costs import waste_report
from finops.savings.waste_tables import job_dicts, reason_csv, reason_dicts, reason_table
from finops.timeutil import utc_now

app = typer.Typer()


@app.command()
def rollup() -> None:
    """Run the scheduled work once: rebuild dirty ledger hours and re-judge their idle episodes."""
    roll_up(load_settings())


@app.command()
def report(
    start: PeriodStart = None,
    end: PeriodEnd = None,
    by: Annotated[
        str,
        typer.Option(
            help="team, job, user, node, gpu_model, reason (idle cost by waste reason per team and month), or "
            "efficiency (SM activity bands per team, busy-but-inefficient jobs and their bottleneck)."
        ),
    ] = "team",
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
    """Cost per team, job, user, node or GPU model over [start, end) (default: this month to date), from the hourly
    ledger; by job with each job's name, team, user, start, end, state (Slurm State, a pod's phase) and GPUs; by GPU
    model one row per price catalog model, whatever names the GPUs were reported under. The table adds this month's
    budgets (only the team's with --team; a budget covers its team on every cluster and partition). Every row says how
    many of the GPU-hours its jobs held have no reading (unmetered: neither used nor idle) and their share of the held
    GPU-hours (``unmetered_gpu_hours``, ``unmetered_share``).
    When ledger hours of the period (before the current hour) are still pending a rollup, one line on stderr
    says how many, and each JSON row carries the count as ``ledger_hours_pending``. When a job import (the
    scheduled sacct import) ran after the ledger was last built and the period reaches the hour last built, the
    current hour's numbers leave that import's jobs out: a line says so and names the command that brings the
    ledger up to date (gpu-finops rollup), first in the table output, on stderr with JSON and CSV; JSON has it as
    ``ledger_stale`` (null when up to date; in each row, or in the body by reason and by efficiency).

    --cluster, --team and --partition select the ledger rows as the dashboard's filters do (finops/analysis/filters.py),
    so the report equals the dashboard's for the same period and filters. GPU-hours whose model has no price are
    counted, never costed: the table's TOTAL line adds them by model, JSON and CSV have unpriced_gpu_hours per row
    (cost null when all its GPU-hours are unpriced), and a line on stderr per model says how to price them.
    A price resting on an estimate (a catalog source marked ``estimate: true``) is named: a line per model and
    pricing model after the table, on stderr with JSON and CSV.

    Each row also has the hardware activity where the GPUs report it (DCGM profiling fields, NVML GPM): SM, tensor
    and DRAM activity (means over the profiled GPU-seconds), the SM-active cost (allocated × SM activity) and the
    profiled share of the held GPU-seconds; "not measured" in the table, null in JSON and empty in CSV where nothing
    measured it (docs/cost-model.md, "Hardware activity").

    --by reason: the idle cost of the job-held GPU-hours per team, month and probable waste reason
    (docs/waste-reasons.md), adding up to the idle cost by team; the table then lists the costliest low-utilisation
    jobs with their reason and evidence. The GPU-hours jobs held without any reading ("no reading") are not idle
    waste: the table lists them apart, after the idle ones, at their allocated cost with their jobs and how to get
    readings; JSON and CSV rows say their ``kind``, ``idle`` or ``unmetered``. JSON has ``rows`` and ``jobs``.
    Takes --team, not --cluster or --partition.

    --by efficiency (docs/efficiency.md): per team its SM activity band (effective ≥ 0.8, moderate ≥ 0.5,
    ineffective below, not measured: NVIDIA's DCGM guidance, FINOPS_EFFICIENCY_*), its allocated, SM-active and
    inactive cost and its jobs' cost per band; then the busy-but-inefficient jobs (utilisation ≥ 0.8 while SM activity
    < 0.5), costliest first, with their probable bottleneck and evidence. JSON has ``teams`` and ``inefficient``; CSV
    the inefficient jobs."""
    if output_format not in ("table", "json", "csv"):
        raise typer.BadParameter("must be table, json or csv", param_hint="--format")
    begin, finish = period(start, end)
    settings = load_settings()
    if by == "reason":
        if cluster is not None or partition is not None:
            raise typer.BadParameter("--by reason takes --team, not --cluster or --partition", param_hint="--by")
        with open_sessions(settings)() as session:
            found = waste_report(session, begin, finish, team=team, policy=settings.reason_policy)
            pending = pending_hours(session, begin, finish)
            stale = stale_ledger(session, finish)
        _pending_note(pending)
        _stale_note(stale, output_format)
        if output_format == "json":
            body = {"rows": reason_dicts(found.rows), "jobs": job_dicts(found.jobs), "ledger_hours_pending": pending,
                    "ledger_stale": _stale_dict(stale)}  # fmt: skip
            typer.echo(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
        elif output_format == "csv":
            typer.echo(reason_csv(found.rows), nl=False)
        else:
            typer.echo(reason_table(found))
        return
    if by == "efficiency":
        with open_sessions(settings)() as session:
            report = efficiency_report(
                session, begin, finish, policy=settings.efficiency_policy, cluster=cluster, team=team,
                partition=partition,
            )  # fmt: skip
            pending = pending_hours(session, begin, finish)
            stale = stale_ledger(session, finish)
        _pending_note(pending)
        _stale_note(stale, output_format)
        if output_format == "json":
            body = {**efficiency_dict(report), "ledger_hours_pending": pending, "ledger_stale": _stale_dict(stale)}
            typer.echo(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
        elif output_format == "csv":
            typer.echo(efficiency_csv(report), nl=False)
        else:
            typer.echo(efficiency_table(report))
        return
    group = next((g for g in GROUP_BYS if g == by), None)
    if group is None:
        raise typer.BadParameter(f"must be one of {', '.join(GROUP_BYS)}, reason or efficiency", param_hint="--by")
    with open_sessions(settings)() as session:
        in_force = pricing_in_force(session, load_pricing(settings)).catalog
        catalog = in_force if group == "gpu_model" else None
        rows = cost_report(
            session, begin, finish, group, cluster=cluster, team=team, partition=partition, catalog=catalog
        )
        estimates = estimated_prices(session, in_force, begin, finish, cluster=cluster, team=team, partition=partition)
        unpriced = unpriced_by_model(session, begin, finish, cluster=cluster, team=team, partition=partition)
        statuses = budget_status(session, utc_now(), team=team) if output_format == "table" else []
        pending = pending_hours(session, begin, finish)
        stale = stale_ledger(session, finish)
    _pending_note(pending)
    _stale_note(stale, output_format)
    if output_format == "json":
        dicts = [
            {
                **row,
                "ledger_hours_pending": pending,
                "ledger_stale": _stale_dict(stale),
            }
            for row in report_dicts(rows, group)
        ]
        typer.echo(orjson.dumps(dicts, option=orjson.OPT_INDENT_2).decode())
    elif output_format == "csv":
        typer.echo(report_csv(rows, group), nl=False)
    else:
        typer.echo(report_table(rows, group, unpriced))
        for estimate in estimates:
            typer.echo(estimate.note)
        if statuses:
            scope = " (whole teams: all clusters and partitions)" if cluster or partition else ""
            typer.echo(f"\nBudgets, month to date{scope}:\n{budget_table(statuses)}")
    if output_format != "table":  # the table says it on its TOTAL line; JSON and CSV stay machine-readable
        for u in unpriced:
            typer.echo(f"unpriced: {u.gpu_hours:,.2f} GPU-hours of {u.model} (not in the costs): {u.fix}", err=True)
        for estimate in estimates:
            typer.echo(estimate.note, err=True)


def _pending_note(pending: int) -> None:
    """Say on stderr that ``pending`` ledger hours of the period are not rolled up yet (nothing when none)."""
    if pending:
        typer.echo(
            f"note: {pending} ledger hour{'s' if pending != 1 else ''} in this period {'are' if pending != 1 else 'is'}"
            " pending (not rolled up yet): these numbers may change; run gpu-finops rollup for current ones",
            err=True,
        )


def _stale_note(stale: StaleLedger | None, output_format: str) -> None:
    """Say in one line that the ledger was built before the last job import (:func:`finops.db.hours.stale_ledger`):
    first on stdout with the table, on stderr with JSON and CSV (which stay machine-readable); nothing when not."""
    if stale is not None:
        typer.echo(stale.hint, err=output_format != "table")


def _stale_dict(stale: StaleLedger | None) -> dict[str, object] | None:
    return None if stale is None else stale.as_dict()
