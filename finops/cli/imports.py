"""``gpu-finops import …``: jobs from Slurm (``sacct`` output, or sacct run for the jobs since the last run)
and Kubernetes (``kubectl get pods`` output), and GPU telemetry from Prometheus (dcgm-exporter series).

Lines or pods that cannot be imported are named on stderr and the rest is imported; the exit code is then 1,
as it is when sacct or Prometheus fails. Each import then rolls up the ledger hours it touched, with their idle
episodes (:func:`finops.cli.context.roll_up`), and prints what the rollup did in one line; ``--no-rollup`` leaves
them pending for a bulk load's one rollup at the end.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import typer

from finops.cli.base import INCOMPLETE
from finops.cli.context import (
    STDIN,
    NoRollup,
    finish_import,
    instant,
    load_settings,
    open_sessions,
    open_text,
    read_bytes,
    roll_up_unless,
)
from finops.ingest.prometheus import LabelNames, PrometheusClient, PrometheusError, parse_step
from finops.ingest.prometheus_pull import PullOptions, import_range
from finops.jobs.kubernetes import load_document, parse_nodes
from finops.jobs.kubernetes_import import import_pods
from finops.jobs.sacct_watermark import watermark_name
from finops.jobs.slurm_import import SacctError, import_sacct, run_sacct
from finops.timeutil import utc_now

app = typer.Typer(
    name="import", help="Import jobs from a scheduler, or GPU telemetry from Prometheus.", no_args_is_help=True
)


@app.command("sacct")
def import_sacct_command(
    file: Annotated[
        str | None, typer.Argument(help="sacct --parsable2 --noheader output, or - for standard input.")
    ] = None,
    run: Annotated[
        bool,
        typer.Option(
            "--run", help="Run sacct (FINOPS_SACCT_COMMAND) for the jobs since the last run and move the watermark."
        ),
    ] = False,
    cluster: Annotated[
        str | None,
        typer.Option(
            help="Cluster name for lines whose Cluster field is empty (and, with --run, sacct's); "
            "default: FINOPS_SACCT_CLUSTER."
        ),
    ] = None,
    timezone: Annotated[
        str, typer.Option(help="IANA time zone sacct printed its times in (the sacct host's local time).")
    ] = "UTC",
    no_rollup: NoRollup = False,
) -> None:
    """Import Slurm jobs from sacct output, or (--run) from sacct itself. For a backfill, as root or SlurmUser:

    `sacct --allusers --allocations --duplicates --starttime=2026-01-01 --endtime=now --parsable2 --noheader
    --format=JobID,JobIDRaw,Cluster,Partition,Account,User,Submit,Start,End,Elapsed,State,AllocTRES,NodeList,JobName`

    (docs/jobs.md says why each flag is there). Times are read in --timezone; a line with a time after now is
    refused, naming --timezone."""
    settings = load_settings()
    cluster = cluster or settings.sacct_cluster
    if run:
        if file is not None:
            raise typer.BadParameter("give FILE or --run, not both", param_hint="FILE")
        _run_sacct(cluster, no_rollup)
        return
    if file is None:
        raise typer.BadParameter("give FILE (or - for standard input), or --run", param_hint="FILE")
    try:
        tz = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise typer.BadParameter(f"unknown time zone {timezone!r}", param_hint="--timezone") from exc
    with open_text(file) as handle, open_sessions(settings).begin() as session:
        result = import_sacct(
            session,
            handle,
            source="<stdin>" if file == STDIN else file,
            cluster=cluster,
            tz=tz,
            not_after=utc_now(),
        )
    finish_import(
        (error.message for error in result.errors),
        f"imported {result.jobs} GPU jobs; {result.without_gpus} without GPUs; {len(result.errors)} bad lines",
        no_rollup,
        settings,
    )


def _run_sacct(cluster: str, no_rollup: bool) -> None:
    """``import sacct --run``: one :func:`finops.jobs.slurm_import.run_sacct` with the FINOPS_SACCT_* settings,
    then the rollup unless ``no_rollup``; exit 1 (watermark not moved) when sacct fails, or when lines of its
    output are refused."""
    settings = load_settings()
    try:
        done = run_sacct(
            open_sessions(settings),
            command=settings.sacct_command,
            cluster=cluster,
            overlap=timedelta(seconds=settings.sacct_overlap_seconds),
            lookback=timedelta(seconds=settings.sacct_lookback_seconds),
            timeout_seconds=settings.sacct_timeout_seconds,
        )
    except SacctError as exc:
        typer.echo(f"error: {exc}", err=True)
        typer.echo(f"watermark {watermark_name(cluster)} not moved", err=True)
        raise typer.Exit(INCOMPLETE) from exc
    result = done.result
    window = f"{done.start:%Y-%m-%dT%H:%M:%S}Z to {done.end:%Y-%m-%dT%H:%M:%S}Z"
    finish_import(
        (error.message for error in result.errors),
        f"sacct from {window}: imported {result.jobs} GPU jobs; {result.without_gpus} without GPUs; "
        f"{len(result.errors)} bad lines; watermark {done.watermark} at {done.end:%Y-%m-%dT%H:%M:%S}Z",
        no_rollup,
        settings,
    )


@app.command("prometheus")
def import_prometheus_command(
    url: Annotated[str, typer.Option(help="Prometheus base URL, e.g. http://prometheus:9090.")],
    start: Annotated[str, typer.Option(help="Range start, ISO 8601 (UTC if no offset).")],
    end: Annotated[str, typer.Option(help="Range end (exclusive), ISO 8601.")],
    step: Annotated[
        str, typer.Option(help="Time between readings: a Prometheus duration (60s, 1m) or seconds.")
    ] = "60s",
    selector: Annotated[str, typer.Option(help='Label matchers added to every series, e.g. {cluster="a"}.')] = "",
    label: Annotated[
        list[str],
        typer.Option(
            help="The site's name for a label, KEY=NAME (repeatable); KEY is one of hostname, instance, gpu, uuid, "
            "model, hpc_job, namespace, pod, mig_profile, mig_instance (default: dcgm-exporter's names)."
        ),
    ] = [],  # noqa: B006
    utilization_field: Annotated[
        list[str],
        typer.Option(help="DCGM field(s) for utilisation, in order of preference (repeatable)."),
    ] = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"],  # noqa: B006
    max_points: Annotated[
        int, typer.Option(min=1, max=11000, help="Readings per series per query (Prometheus allows 11,000).")
    ] = 1440,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each query.")] = 60.0,
    no_rollup: NoRollup = False,
) -> None:
    """Pull dcgm-exporter GPU telemetry over [start, end) from Prometheus (query_range) and store it like collector
    readings; pulling a range again adds nothing. The hours stored are rolled up, also when a query failed."""
    try:
        step_seconds = parse_step(step)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--step") from exc
    try:
        labels = LabelNames.parse(label)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--label") from exc
    try:
        options = PullOptions(step_seconds, selector, labels, tuple(utilization_field), max_points)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--selector/--utilization-field") from exc
    begin, finish = instant(start, "--start"), instant(end, "--end")
    if finish < begin:
        raise typer.BadParameter("is before --start", param_hint="--end")
    settings = load_settings()
    client = PrometheusClient(url, timeout_seconds=timeout)
    try:
        result = import_range(open_sessions(settings), client, begin, finish, options)
    except PrometheusError as exc:
        typer.echo(f"error: {exc}", err=True)
        typer.echo("the query windows before it are stored; pulling the range again adds nothing twice", err=True)
        roll_up_unless(no_rollup, settings)
        raise typer.Exit(INCOMPLETE) from exc
    finally:
        client.close()
    typer.echo(
        f"pulled {result.readings} readings of {len(result.gpus)} GPUs on {len(result.nodes)} nodes "
        f"in {result.chunks} query windows; {result.mig_readings} MIG instance readings left out"
    )
    roll_up_unless(no_rollup, settings)


@app.command("pods")
def import_pods_command(
    file: Annotated[str, typer.Argument(help="kubectl get pods -A -o json output, or - for standard input.")],
    cluster: Annotated[str, typer.Option(help="Name of the Kubernetes cluster the pods run on.")] = "default",
    complete: Annotated[
        bool,
        typer.Option(help="The listing holds every pod of the cluster: end open pods it lacks at the listing time."),
    ] = False,
    nodes: Annotated[
        Path | None, typer.Option(help="kubectl get nodes -o json output: node labels (node pools, GPU product).")
    ] = None,
    listed_at: Annotated[str | None, typer.Option(help="When the listing was taken, ISO 8601 (default: now).")] = None,
    no_rollup: NoRollup = False,
) -> None:
    """Import Kubernetes pods that hold NVIDIA GPUs (nvidia.com/gpu, nvidia.com/mig-<profile>) as jobs."""
    at = instant(listed_at, "--listed-at") if listed_at else utc_now()
    settings = load_settings()
    sessions = open_sessions(settings)
    source = "<stdin>" if file == STDIN else file
    text = read_bytes(file)
    node_labels: dict[str, dict[str, str]] | None = None
    node_errors: list[str] = []
    if nodes is not None:
        node_labels, node_errors = parse_nodes(load_document(read_bytes(nodes), source=str(nodes)), source=str(nodes))
    document = load_document(text, source=source)
    with sessions.begin() as session:
        result = import_pods(
            session, document, source=source, listed_at=at, cluster=cluster, complete=complete, nodes=node_labels
        )
    finish_import(
        [*node_errors, *(error.message for error in result.errors)],
        f"imported {result.jobs} GPU pods; {result.without_gpus} without GPUs; {result.not_started} not started; "
        f"{result.ended_missing} ended as gone; {result.nodes_labelled} node labels; {len(result.errors)} bad pods",
        no_rollup,
        settings,
    )
