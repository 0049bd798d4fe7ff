"""``gpu-finops idle …``: the idle GPU episodes the rollup stored (:func:`finops.analysis.idle.list_episodes`, as the
REST API's ``/api/v1/idle-episodes`` lists them), as a table, JSON or CSV."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer

from finops.analysis.idle import EpisodeView, episode_totals, list_episodes
from finops.cli.context import PeriodEnd, PeriodStart, load_settings, open_sessions, period
from finops.csv_cells import dict_rows_csv
from finops.ledger.rollup_result import unpriced_fix

app = typer.Typer(
    name="idle", help="Idle GPU episodes: allocated GPUs at or below the idle threshold.", no_args_is_help=True
)

FORMATS = ("table", "json", "csv")
_COLUMNS = (
    "node",
    "gpu_index",
    "job_id",
    "user",
    "team",
    "start",
    "end",
    "hours",
    "memory_held",
    "cost",
    "currency",
    "unpriced_model",
    "unpriced_fix",
    "reason",
    "reason_title",
    "evidence",
)


@app.command("list")
def idle_list(
    start: PeriodStart = None,
    end: PeriodEnd = None,
    team: Annotated[str | None, typer.Option(help="Only the episodes of this team's jobs.")] = None,
    output_format: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
) -> None:
    """Idle episodes overlapping [start, end) (default: this month to date), costliest first: node, GPU, job, user,
    team, when, how long, whether GPU memory stayed held, what the idle time cost, and its probable waste reason
    (docs/waste-reasons.md; the evidence in JSON and CSV). An episode on a GPU whose model has no price is "unpriced"
    (after the priced ones, longest first), with the model and the fix. JSON as the REST API gives it."""
    if output_format not in FORMATS:
        raise typer.BadParameter(f"must be one of {', '.join(FORMATS)}", param_hint="--format")
    begin, finish = period(start, end)
    with open_sessions(load_settings())() as session:
        episodes = list_episodes(session, begin, finish, team=team)
    if output_format == "json":
        typer.echo(orjson.dumps([e.as_dict() for e in episodes], option=orjson.OPT_INDENT_2).decode())
    elif output_format == "csv":
        typer.echo(episodes_csv(episodes), nl=False)
    else:
        typer.echo(episodes_table(episodes))


def episodes_csv(episodes: list[EpisodeView]) -> str:
    """The episodes as CSV with a header line, the fields of the JSON (null as an empty field)."""
    return dict_rows_csv(_COLUMNS, (e.as_dict() for e in episodes))


def episodes_table(episodes: list[EpisodeView]) -> str:
    """The episodes as a text table (the probable reason last), with a total line (GPU-hours and the cost of the priced
    episodes per currency, and the unpriced GPU-hours by model) and, when some are unpriced, one line per model saying
    how to price it."""
    lines = [
        f"{'node':<16} {'gpu':>3} {'job':<20} {'user':<12} {'team':<16} {'start (UTC)':<16} {'hours':>7} mem "
        f"{'cost':>16}  reason"
    ]
    for e in episodes:
        cost = f"{'unpriced':>12} ({e.model})" if e.cost is None else f"{e.cost:>12.2f} {e.currency}"
        reason = "" if e.verdict is None else e.verdict.title
        lines.append(
            f"{e.node:<16} {e.gpu_index:>3} {e.job_id:<20} {e.user:<12} {e.team:<16} {e.start:%Y-%m-%d %H:%M} "
            f"{e.hours:>7.2f} {'yes' if e.memory_held else 'no ':<3} {cost}  {reason}".rstrip()
        )
    parts = []
    models: dict[str, float] = {}
    for t in episode_totals(episodes):
        part = f"{t.gpu_hours:.2f} GPU-hours, " + ("unpriced" if t.all_unpriced else f"{t.cost:.2f} {t.currency}")
        unpriced_hours = sum(t.unpriced_gpu_hours.values())
        if t.unpriced_gpu_hours and not t.all_unpriced:
            part += f" + {unpriced_hours:.2f} unpriced GPU-hours"
        parts.append(part)
        for model, hours in t.unpriced_gpu_hours.items():
            models[model] = models.get(model, 0.0) + hours
    summary = "; ".join(parts)
    lines.append(f"{len(episodes)} episode{'s' if len(episodes) != 1 else ''}" + (f": {summary}" if summary else ""))
    for model, hours in sorted(models.items()):
        lines.append(f"unpriced: {hours:.2f} GPU-hours of {model!r}, which has no price: {unpriced_fix(model)}")
    return "\n".join(lines)
