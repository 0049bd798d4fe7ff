"""``gpu-finops idle …``: the idle GPU episodes the rollup stored (:func:`finops.analysis.idle.list_episodes`, as the
REST API's ``/api/v1/idle-episodes`` lists them), as a table, JSON or CSV."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from typing import Annotated

import orjson
import typer

from finops.analysis.idle import EpisodeView, list_episodes
from finops.cli.context import instant, load_settings, open_sessions

app = typer.Typer(
    name="idle", help="Idle GPU episodes: allocated GPUs at or below the idle threshold.", no_args_is_help=True
)

FORMATS = ("table", "json", "csv")
_COLUMNS = ("node", "gpu_index", "job_id", "user", "team", "start", "end", "hours", "memory_held", "cost", "currency")


@app.command("list")
def idle_list(
    start: Annotated[str, typer.Option(help="Period start, ISO 8601 (UTC if no offset).")],
    end: Annotated[str, typer.Option(help="Period end (exclusive), ISO 8601.")],
    team: Annotated[str | None, typer.Option(help="Only the episodes of this team's jobs.")] = None,
    output_format: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
) -> None:
    """Idle episodes overlapping [start, end), costliest first: node, GPU, job, user, team, when, how long,
    whether GPU memory stayed held, what the idle time cost. JSON as the REST API gives it."""
    if output_format not in FORMATS:
        raise typer.BadParameter(f"must be one of {', '.join(FORMATS)}", param_hint="--format")
    begin, finish = instant(start, "--start"), instant(end, "--end")
    if finish < begin:
        raise typer.BadParameter("is before --start", param_hint="--end")
    with open_sessions(load_settings())() as session:
        episodes = list_episodes(session, begin, finish, team=team)
    if output_format == "json":
        typer.echo(orjson.dumps([e.as_dict() for e in episodes], option=orjson.OPT_INDENT_2).decode())
    elif output_format == "csv":
        typer.echo(episodes_csv(episodes), nl=False)
    else:
        typer.echo(episodes_table(episodes))


def episodes_csv(episodes: list[EpisodeView]) -> str:
    """The episodes as CSV with a header line, the fields of the JSON."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(e.as_dict() for e in episodes)
    return out.getvalue()


def episodes_table(episodes: list[EpisodeView]) -> str:
    """The episodes as a text table, with a total line (cost per currency)."""
    lines = [
        f"{'node':<16} {'gpu':>3} {'job':<20} {'user':<12} {'team':<16} {'start (UTC)':<16} {'hours':>7} mem "
        f"{'cost':>12}"
    ]
    for e in episodes:
        lines.append(
            f"{e.node:<16} {e.gpu_index:>3} {e.job_id:<20} {e.user:<12} {e.team:<16} {e.start:%Y-%m-%d %H:%M} "
            f"{e.hours:>7.2f} {'yes' if e.memory_held else 'no ':<3} {e.cost:>12.2f} {e.currency}"
        )
    totals: dict[str, tuple[float, Decimal]] = {}
    for e in episodes:
        hours, cost = totals.get(e.currency, (0.0, Decimal(0)))
        totals[e.currency] = (hours + e.hours, cost + e.cost)
    summary = "; ".join(f"{hours:.2f} GPU-hours, {cost:.2f} {c}" for c, (hours, cost) in sorted(totals.items()))
    lines.append(f"{len(episodes)} episode{'s' if len(episodes) != 1 else ''}" + (f": {summary}" if summary else ""))
    return "\n".join(lines)
