"""``gpu-finops mfu``: each inference job's model FLOPs utilisation, cost per PFLOP and cost per 1M tokens over a
period (:mod:`finops.analysis.mfu`), from the ledger and the Prometheus that scrapes its vLLM or SGLang servers."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer

from finops.analysis.mfu import JobEfficiency, job_efficiency
from finops.analysis.report_format import dicts_csv
from finops.cli.base import INCOMPLETE
from finops.cli.context import PeriodEnd, PeriodStart, load_pricing, load_settings, open_sessions, period
from finops.ingest.prometheus import LabelNames, PrometheusClient, PrometheusError
from finops.pricing.peaks import PRECISIONS, Precision
from finops.pricing.store import catalog_in_force

app = typer.Typer()

FORMATS = ("table", "json", "csv")


@app.command("mfu")
def mfu_command(
    start: PeriodStart = None,
    end: PeriodEnd = None,
    job: Annotated[list[str], typer.Option(help="Only this job (repeatable): namespace/pod or a Slurm job id.")] = [],  # noqa: B006
    cluster: Annotated[str | None, typer.Option(help="Only jobs of this cluster.")] = None,
    team: Annotated[str | None, typer.Option(help="Only jobs billed to this team.")] = None,
    precision: Annotated[
        str | None,
        typer.Option(help=f"Peak to divide by: {', '.join(PRECISIONS)} (default: FINOPS_MFU_PRECISION)."),
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="Prometheus that scrapes the inference servers (default: FINOPS_PROMETHEUS_URL).")
    ] = None,
    selector: Annotated[
        str | None, typer.Option(help='Label matchers added to every series, e.g. {cluster="a"}.')
    ] = None,
    label: Annotated[
        list[str], typer.Option(help="The site's name for a label, KEY=NAME (repeatable): hpc_job, namespace, pod.")
    ] = [],  # noqa: B006
    output_format: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
) -> None:
    """Model FLOPs utilisation (PaLM's MFU: achieved FLOP/s ÷ the GPU's dense datasheet peak) of the jobs the ledger
    holds over [start, end) (default: this month to date), costliest first, with their cost per PFLOP and per 1M
    generated tokens. FLOPs are what vLLM or SGLang report with --enable-mfu-metrics; a job whose servers report
    none has no MFU (the table says how to fix it), never an estimate."""
    if output_format not in FORMATS:
        raise typer.BadParameter(f"must be one of {', '.join(FORMATS)}", param_hint="--format")
    settings = load_settings()
    chosen = _precision(precision or settings.mfu_precision)
    base = url or settings.prometheus_url
    if not base:
        raise typer.BadParameter("no Prometheus: give --url or set FINOPS_PROMETHEUS_URL", param_hint="--url")
    try:
        labels = LabelNames.parse(label)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--label") from exc
    begin, finish = period(start, end)
    with open_sessions(settings)() as session:
        catalog = catalog_in_force(session, load_pricing(settings).catalog)
        try:
            rows = job_efficiency(
                session, PrometheusClient(base), catalog, begin, finish, jobs=job, cluster=cluster, team=team,
                precision=chosen, labels=labels,
                selector=settings.prometheus_selector if selector is None else selector,
            )  # fmt: skip
        except PrometheusError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(INCOMPLETE) from exc
    if output_format == "json":
        typer.echo(orjson.dumps(efficiency_dicts(rows), option=orjson.OPT_INDENT_2).decode())
    elif output_format == "csv":
        typer.echo(dicts_csv(efficiency_dicts(rows)), nl=False)
    else:
        typer.echo(efficiency_table(rows))


def _precision(name: str) -> Precision:
    """``name`` as a peak precision; BadParameter naming the known ones otherwise."""
    for known in PRECISIONS:
        if name == known:
            return known
    raise typer.BadParameter(f"{name!r} must be one of {', '.join(PRECISIONS)}", param_hint="--precision")


def efficiency_dicts(rows: list[JobEfficiency]) -> list[dict[str, object]]:
    """The rows as JSON-ready dicts: money as decimal strings, instants ISO 8601, unknowns null (never 0)."""

    def text(value: object) -> object:
        return None if value is None else str(value)

    return [
        {
            "job": row.job,
            "team": row.team,
            "start": row.start.isoformat(),
            "end": row.end.isoformat(),
            "gpu_model": row.gpu_model,
            "gpu_hours": round(row.gpu_seconds / 3600, 6),
            "cost": text(row.cost),
            "currency": row.currency,
            "tokens": row.tokens,
            "cost_per_million_tokens": text(row.cost_per_million_tokens),
            "precision": row.precision,
            "peak_tflops": text(row.peak_tflops),
            "achieved_tflops_per_gpu": None
            if row.achieved_flops_per_gpu is None
            else row.achieved_flops_per_gpu / 1e12,
            "pflops": None if row.flops is None else row.flops / 1e15,
            "mfu": row.mfu,
            "cost_per_pflop": text(row.cost_per_pflop),
            "mfu_note": row.mfu_note,
        }
        for row in rows
    ]


def _tera(flops: float | None) -> float | None:
    """FLOP/s as TFLOP/s; None stays None."""
    return None if flops is None else flops / 1e12


def efficiency_table(rows: list[JobEfficiency]) -> str:
    """The rows as a text table; a job without MFU shows "-" and, below the table, why and the fix."""

    def cell(value: object, spec: str, width: int) -> str:
        return f"{'-':>{width}}" if value is None else f"{value:>{width}{spec}}"

    lines = [
        f"{'job':<24} {'team':<12} {'gpu model':<16} {'GPU-h':>7} {'cost':>12} {'$/1M tok':>10} {'TFLOP/s/GPU':>11} "
        f"{'peak':>8} {'MFU':>7} {'$/PFLOP':>10}"
    ]
    notes = []
    for row in rows:
        achieved = _tera(row.achieved_flops_per_gpu)
        mfu = None if row.mfu is None else f"{row.mfu:.1%}"
        lines.append(
            f"{row.job:<24} {row.team or '-':<12} {row.gpu_model or '-':<16} {row.gpu_seconds / 3600:>7.2f} "
            f"{cell(row.cost, '.2f', 8)} {row.currency} {cell(row.cost_per_million_tokens, '.4f', 10)} "
            f"{cell(achieved, '.1f', 11)} {cell(row.peak_tflops, '', 8)} {cell(mfu, '', 7)} "
            f"{cell(row.cost_per_pflop, '.6f', 10)}"
        )
        if row.mfu_note:
            notes.append(f"{row.job}: no MFU: {row.mfu_note}")
    precisions = sorted({row.precision for row in rows})
    lines.append(f"{len(rows)} job{'s' if len(rows) != 1 else ''}; peak: dense {', '.join(precisions) or '-'} TFLOPS")
    return "\n".join(lines + notes)
