"""``gpu-finops rightsizing``: jobs that held more GPUs, or larger ones, than their use needed, with the saving and
the request line that fixes it (:mod:`finops.savings.rightsizing`)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated

import orjson
import typer

from finops.cli.context import PeriodEnd, PeriodStart, load_pricing, load_settings, open_sessions, period
from finops.db.hours import pending_hours
from finops.pricing.store import catalog_in_force
from finops.savings.rightsizing import rightsizing
from finops.savings.rightsizing_policy import MAX_MEMORY_HEADROOM, RightsizingPolicy
from finops.savings.rightsizing_report import GROUP_BYS, rightsizing_csv, rightsizing_dicts, rightsizing_table
from finops.timeutil import utc_now

app = typer.Typer()

FORMATS = ("table", "json", "csv")
_DEFAULTS = RightsizingPolicy()


@app.command("rightsizing")
def rightsizing_command(
    start: PeriodStart = None,
    end: PeriodEnd = None,
    by: Annotated[str, typer.Option(help="job, user or team.")] = "job",
    output_format: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
    cluster: Annotated[str | None, typer.Option(help="Only jobs of this cluster.")] = None,
    team: Annotated[str | None, typer.Option(help="Only jobs billed to this team.")] = None,
    partition: Annotated[str | None, typer.Option(help="Only jobs of this partition.")] = None,
    user: Annotated[str | None, typer.Option(help="Only jobs of this user.")] = None,
    idle_ratio: Annotated[
        float, typer.Option(min=0, max=1, help="A GPU whose mean utilisation over the job is at or below this is idle.")
    ] = _DEFAULTS.idle_ratio,
    low_utilization_ratio: Annotated[
        float,
        typer.Option(
            min=0,
            max=1,
            help="Jobs whose kept GPUs' mean is at or below this are matched to a MIG slice or a "
            "smaller model (Job Defense Shield's default: 15 %).",
        ),
    ] = _DEFAULTS.low_utilization_ratio,
    memory_headroom: Annotated[
        str, typer.Option(help="Memory peak × this must fit the MIG profile or model (from 1 to 100).")
    ] = str(_DEFAULTS.memory_headroom),
) -> None:
    """Right-sizing over [start, end) (default: this month to date), from the hourly ledger and memory readings:
    jobs that requested N GPUs and kept k < N busy, with the GPU-hours and cost a request of max(k, 1) would have
    saved; jobs at low utilisation whose memory peak fits a MIG profile of their GPU model or a cheaper model, with
    the saving at current prices. Each job comes with the request line that fixes it (#SBATCH --gres=gpu:h100:2,
    #SBATCH --gres=gpu:1g.10gb:1, or the pod's resources.limits); a job at low utilisation without memory readings
    is listed as such. --by user or team sums the jobs. Rules and thresholds: finops/savings/rightsizing.py."""
    group = next((g for g in GROUP_BYS if g == by), None)
    if group is None:
        raise typer.BadParameter(f"must be one of {', '.join(GROUP_BYS)}", param_hint="--by")
    if output_format not in FORMATS:
        raise typer.BadParameter(f"must be one of {', '.join(FORMATS)}", param_hint="--format")
    try:
        if not memory_headroom.isascii() or len(memory_headroom) > 32:  # Decimal() takes full-width digits too
            raise InvalidOperation
        policy = RightsizingPolicy(idle_ratio, low_utilization_ratio, Decimal(memory_headroom))
    except (InvalidOperation, ValueError) as exc:
        raise typer.BadParameter(
            f"{memory_headroom[:32]!r}: a number from 1 to {MAX_MEMORY_HEADROOM}", param_hint="--memory-headroom"
        ) from exc
    begin, finish = period(start, end)
    settings = load_settings()
    with open_sessions(settings)() as session:
        catalog = catalog_in_force(session, load_pricing(settings).catalog)
        report = rightsizing(
            session, begin, finish, catalog=catalog, priced_at=utc_now(), policy=policy,
            cluster=cluster, team=team, partition=partition, user=user,
        )  # fmt: skip
        pending = pending_hours(session, begin, finish)
    if pending:
        typer.echo(
            f"note: {pending} ledger hour(s) in this period pending (not rolled up yet): these findings may change; "
            "run gpu-finops rollup for current ones",
            err=True,
        )
    if output_format == "json":
        typer.echo(orjson.dumps(rightsizing_dicts(report, group), option=orjson.OPT_INDENT_2).decode())
    elif output_format == "csv":
        typer.echo(rightsizing_csv(report, group), nl=False)
    else:
        typer.echo(rightsizing_table(report, group))
