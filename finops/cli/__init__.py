"""``gpu-finops``: the one command line for the collector, the service, imports, reports and the demo.

Imports are inside the commands so that ``gpu-finops collector`` on a GPU node loads only the collector.
Every command that reads or writes the database refuses to run before ``gpu-finops db upgrade``.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from finops.cli.alerts import alerts_app

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from alerts.service import AlertRunner
    from finops.analysis.budgets import BudgetStatus
    from finops.analysis.idle import IdlePolicy
    from finops.ingest.prometheus_pull import ScheduledPull
    from finops.jobs.slurm_import import ScheduledSacct
    from finops.pricing.catalog import Pricing
    from finops.settings import Settings

app = typer.Typer(help="GPU cluster telemetry turned into cost per team and job.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
import_app = typer.Typer(help="Import jobs from a scheduler, or GPU telemetry from Prometheus.", no_args_is_help=True)
team_app = typer.Typer(help="Teams and the rules that give jobs their team.", no_args_is_help=True)
budget_app = typer.Typer(help="Monthly team budgets.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(import_app, name="import")
app.add_typer(team_app, name="team")
app.add_typer(budget_app, name="budget")
prices_app = typer.Typer(
    help="The price catalog and which pricing model each node is billed under.", no_args_is_help=True
)
app.add_typer(prices_app, name="prices")
app.add_typer(alerts_app, name="alerts")


def _settings() -> Settings:
    from finops.settings import Settings

    return Settings()


def _engine(settings: Settings, *, migrated: bool = True) -> Engine:
    from finops.db.engine import NotMigratedError, make_engine, require_migrated

    engine = make_engine(settings.effective_database_url)
    if migrated:
        try:
            require_migrated(engine)
        except NotMigratedError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
    return engine


def _pricing(settings: Settings) -> Pricing:
    from finops.pricing.catalog import Pricing, load_catalog

    return Pricing(load_catalog(settings.price_catalog), settings.pricing_model)


def _prometheus_pull(settings: Settings) -> ScheduledPull | None:
    """The scheduled Prometheus pull when ``FINOPS_PROMETHEUS_URL`` is set."""
    if not settings.prometheus_url:
        return None
    from finops.ingest.prometheus import PrometheusClient
    from finops.ingest.prometheus_pull import PullOptions, ScheduledPull

    try:
        options = PullOptions(step_seconds=settings.prometheus_step_seconds, selector=settings.prometheus_selector)
    except ValueError as exc:
        typer.echo(f"error: FINOPS_PROMETHEUS_SELECTOR: {exc}", err=True)
        raise typer.Exit(2) from exc
    return ScheduledPull(PrometheusClient(settings.prometheus_url), options, settings.rollup_interval_seconds)


def _scheduled_sacct(settings: Settings) -> ScheduledSacct | None:
    """The scheduled sacct import when ``FINOPS_SACCT_SCHEDULE_SECONDS`` is set."""
    if not settings.sacct_schedule_seconds:
        return None
    from finops.jobs.slurm_import import ScheduledSacct

    return ScheduledSacct(
        command=settings.sacct_command,
        cluster=settings.sacct_cluster,
        interval_seconds=settings.sacct_schedule_seconds,
        overlap_seconds=settings.sacct_overlap_seconds,
        lookback_seconds=settings.sacct_lookback_seconds,
        timeout_seconds=settings.sacct_timeout_seconds,
    )


def _alert_runner(settings: Settings, sessions: sessionmaker[Session]) -> AlertRunner:
    """The alert jobs for the scheduler (rules file, webhooks and SMTP from the settings); exit 2 for a bad file."""
    from alerts.config import AlertConfigError
    from alerts.service import AlertRunner, AlertService

    try:
        return AlertRunner(AlertService.from_settings(settings), sessions)
    except AlertConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _idle_policy(settings: Settings) -> IdlePolicy:
    from finops.analysis.idle import IdlePolicy

    return IdlePolicy(
        settings.idle_threshold_ratio,
        settings.idle_window_seconds,
        settings.idle_max_gap_seconds,
        settings.idle_grace_seconds,
        settings.idle_partition_thresholds,
    )


def _instant(text: str, option: str) -> datetime:
    from finops.timeutil import parse_utc

    try:
        return parse_utc(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 time", param_hint=option) from exc


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at DEBUG level.")] = False) -> None:
    """GPU cluster telemetry turned into cost per team and job."""
    for chatty in ("httpx", "alembic"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every migration not yet applied (running it again changes nothing)."""
    from finops.db.engine import current_revision, upgrade

    engine = _engine(_settings(), migrated=False)
    upgrade(engine)
    typer.echo(f"database at migration {current_revision(engine)}")


@db_app.command("prune-samples")
def db_prune_samples(
    retention_days: Annotated[
        int | None, typer.Option(min=1, help="Days of samples to keep (default: FINOPS_SAMPLE_RETENTION_DAYS).")
    ] = None,
) -> None:
    """Drop raw GPU samples older than the retention (whole days; hours awaiting a ledger rebuild keep theirs).

    PostgreSQL drops whole day partitions of gpu_samples; SQLite deletes the rows. The ledger is kept.
    """
    from finops.db.engine import session_factory
    from finops.ingest.partitions import prune_samples
    from finops.timeutil import utc_now

    settings = _settings()
    days = retention_days if retention_days is not None else settings.sample_retention_days
    with session_factory(_engine(settings)).begin() as session:
        pruned = prune_samples(session, days, utc_now())
    if pruned.rows is None:
        typer.echo(f"samples before {pruned.before.isoformat()} removed: {len(pruned.partitions)} day partitions")
    else:
        typer.echo(f"samples before {pruned.before.isoformat()} removed: {pruned.rows} rows")
    for name in pruned.partitions:
        typer.echo(f"  dropped {name}")


@db_app.command("current")
def db_current() -> None:
    """Print the migration the database is at."""
    from finops.db.engine import current_revision, head_revision

    engine = _engine(_settings(), migrated=False)
    typer.echo(f"at {current_revision(engine) or 'none'}, newest {head_revision()}")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    scheduler: Annotated[bool, typer.Option(help="Run the rollup and budget jobs in this process.")] = True,
    insecure_no_token: Annotated[bool, typer.Option(help="Accept ingest without a bearer token.")] = False,
) -> None:
    """Run the service: ingest API, /healthz, /metrics and (by default) the scheduled jobs."""
    import uvicorn

    from finops.db.engine import session_factory
    from finops.service.cost_metrics import CostMetrics
    from finops.service.scheduler import start_scheduler
    from finops.web.app import ServiceMetrics, create_app

    settings = _settings()
    engine = _engine(settings)
    token = settings.ingest_token.get_secret_value() if settings.ingest_token else None
    if token is None and not insecure_no_token:
        typer.echo("error: set FINOPS_INGEST_TOKEN or FINOPS_INGEST_TOKEN_FILE (or pass --insecure-no-token)", err=True)
        raise typer.Exit(2)
    sessions = session_factory(engine)
    metrics = ServiceMetrics()
    running = None
    if scheduler:
        policy = _idle_policy(settings)
        running = start_scheduler(
            sessions,
            _pricing(settings),
            policy,
            CostMetrics(metrics.registry),
            settings.rollup_interval_seconds,
            prometheus=_prometheus_pull(settings),
            sacct=_scheduled_sacct(settings),
            sample_retention_days=settings.sample_retention_days,
            alerts=_alert_runner(settings, sessions),
        )
    try:
        api_token = settings.api_token.get_secret_value() if settings.api_token else None
        app = create_app(sessions, token, metrics, api_token, _pricing(settings).catalog)
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        if running is not None:
            running.shutdown(wait=False)


@app.command()
def scheduler(
    metrics_port: Annotated[int, typer.Option(help="Port of this process's /metrics (budget gauges).")] = 8081,
    metrics_address: Annotated[str, typer.Option(help="Address /metrics listens on.")] = "127.0.0.1",
) -> None:
    """Run only the scheduled jobs (ledger rollup, idle detection, budget gauges), apart from `serve --no-scheduler`."""
    import threading

    from prometheus_client import CollectorRegistry, start_http_server

    from finops.db.engine import session_factory
    from finops.service.cost_metrics import CostMetrics
    from finops.service.scheduler import start_scheduler

    settings = _settings()
    sessions = session_factory(_engine(settings))
    registry = CollectorRegistry()
    policy = _idle_policy(settings)
    running = start_scheduler(
        sessions,
        _pricing(settings),
        policy,
        CostMetrics(registry),
        settings.rollup_interval_seconds,
        prometheus=_prometheus_pull(settings),
        sacct=_scheduled_sacct(settings),
        sample_retention_days=settings.sample_retention_days,
        alerts=_alert_runner(settings, sessions),
    )
    start_http_server(metrics_port, addr=metrics_address, registry=registry)
    try:
        threading.Event().wait()
    finally:
        running.shutdown(wait=False)


@app.command()
def collector(
    service_url: Annotated[str, typer.Option(envvar="FINOPS_SERVICE_URL", help="gpu-finops service base URL.")],
    source: Annotated[
        list[str],
        typer.Option(help="Sources to run (repeatable): nvml, nvidia_smi, dcgm, infiniband, diskstats, nfs, lustre."),
    ] = ["nvml", "infiniband", "diskstats", "nfs", "lustre"],  # noqa: B006
    node: Annotated[str, typer.Option(help="This host's name as Slurm knows it (default: hostname).")] = "",
    token_file: Annotated[
        Path | None, typer.Option(envvar="FINOPS_INGEST_TOKEN_FILE", help="Bearer token file.")
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between collections.")] = 10.0,
    metrics_address: Annotated[str, typer.Option(help="Address /metrics listens on.")] = "0.0.0.0",
    metrics_port: Annotated[int, typer.Option(help="Port of the collector's /metrics.")] = 9835,
    spool_dir: Annotated[
        Path, typer.Option(envvar="FINOPS_SPOOL_DIR", help="Durable queue of readings not yet acknowledged.")
    ] = Path("/var/lib/gpu-finops/spool"),
    spool_max_mib: Annotated[int, typer.Option(help="Spool size bound, MiB (oldest readings dropped beyond).")] = 256,
    proc_root: Annotated[Path, typer.Option(help="procfs mount point.")] = Path("/proc"),
    sys_root: Annotated[Path, typer.Option(help="sysfs mount point.")] = Path("/sys"),
    dcgm_url: Annotated[str, typer.Option(help="dcgm-exporter /metrics URL.")] = "http://127.0.0.1:9400/metrics",
    nvidia_smi: Annotated[str, typer.Option(help="nvidia-smi command for the nvidia_smi source.")] = "nvidia-smi",
    job_mapping_dir: Annotated[
        Path | None, typer.Option(help="GPU → job directory written by the Slurm prolog (e.g. /run/gpustat).")
    ] = None,
) -> None:
    """Run the node collector: read sources every interval, serve /metrics, spool and ship GPU readings."""
    import os
    import socket
    import threading

    from collector import node as node_process

    token = token_file.read_text().strip() if token_file else os.environ.get("FINOPS_INGEST_TOKEN", "")
    config = node_process.NodeConfig(
        service_url=service_url,
        token=token,
        node=node or socket.gethostname(),
        spool_dir=spool_dir,
        spool_max_bytes=spool_max_mib * 2**20,
        interval_seconds=interval,
        metrics_address=metrics_address,
        metrics_port=metrics_port,
        proc_root=proc_root,
        sys_root=sys_root,
        dcgm_url=dcgm_url,
        nvidia_smi=nvidia_smi,
        job_mapping_dir=job_mapping_dir,
    )
    try:
        sources = [node_process.build_source(name, config) for name in source]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--source") from exc
    node_process.run(config, sources, threading.Event())


@import_app.command("sacct")
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
        str, typer.Option(help="Cluster name for lines whose Cluster field is empty (and, with --run, sacct's).")
    ] = "default",
    timezone: Annotated[
        str, typer.Option(help="IANA time zone sacct printed its times in (the sacct host's local time).")
    ] = "UTC",
) -> None:
    """Import Slurm jobs from `sacct --parsable2 --noheader --format=JobID,JobIDRaw,Cluster,Partition,Account,
    User,Submit,Start,End,Elapsed,State,AllocTRES,NodeList,JobName` output, or (--run) from sacct itself."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from finops.db.engine import session_factory
    from finops.jobs.slurm_import import import_sacct

    if run:
        if file is not None:
            raise typer.BadParameter("give FILE or --run, not both", param_hint="FILE")
        _run_sacct(cluster)
        return
    if file is None:
        raise typer.BadParameter("give FILE (or - for standard input), or --run", param_hint="FILE")
    try:
        tz = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise typer.BadParameter(f"unknown time zone {timezone!r}", param_hint="--timezone") from exc
    engine = _engine(_settings())
    try:
        handle = sys.stdin if file == "-" else open(file, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        typer.echo(f"error: {file}: {exc.strerror}", err=True)
        raise typer.Exit(2) from exc
    with handle, session_factory(engine).begin() as session:
        result = import_sacct(session, handle, source="<stdin>" if file == "-" else file, cluster=cluster, tz=tz)
    for error in result.errors:
        typer.echo(f"skipped {error.message}", err=True)
    typer.echo(f"imported {result.jobs} GPU jobs; {result.without_gpus} without GPUs; {len(result.errors)} bad lines")
    if result.errors:
        raise typer.Exit(1)


def _run_sacct(cluster: str) -> None:
    """``import sacct --run``: one :func:`finops.jobs.slurm_import.run_sacct` with the FINOPS_SACCT_* settings."""
    from datetime import timedelta

    from finops.db.engine import session_factory
    from finops.jobs.slurm_import import SacctError, run_sacct, watermark_name

    settings = _settings()
    try:
        done = run_sacct(
            session_factory(_engine(settings)),
            command=settings.sacct_command,
            cluster=cluster,
            overlap=timedelta(seconds=settings.sacct_overlap_seconds),
            lookback=timedelta(seconds=settings.sacct_lookback_seconds),
            timeout_seconds=settings.sacct_timeout_seconds,
        )
    except SacctError as exc:
        typer.echo(f"error: {exc}", err=True)
        typer.echo(f"watermark {watermark_name(cluster)} not moved", err=True)
        raise typer.Exit(1) from exc
    result = done.result
    for error in result.errors:
        typer.echo(f"skipped {error.message}", err=True)
    window = f"{done.start:%Y-%m-%dT%H:%M:%S}Z to {done.end:%Y-%m-%dT%H:%M:%S}Z"
    typer.echo(
        f"sacct from {window}: imported {result.jobs} GPU jobs; {result.without_gpus} without GPUs; "
        f"{len(result.errors)} bad lines; watermark {watermark_name(cluster)} at {done.end:%Y-%m-%dT%H:%M:%S}Z"
    )
    if result.errors:
        raise typer.Exit(1)


@import_app.command("prometheus")
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
) -> None:
    """Pull dcgm-exporter GPU telemetry over [start, end) from Prometheus (query_range) and store it like collector
    readings; pulling a range again adds nothing."""
    from finops.db.engine import session_factory
    from finops.ingest.prometheus import LabelNames, PrometheusClient, PrometheusError, parse_step
    from finops.ingest.prometheus_pull import PullOptions, import_range

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
    begin, finish = _instant(start, "--start"), _instant(end, "--end")
    if finish < begin:
        raise typer.BadParameter("is before --start", param_hint="--end")
    client = PrometheusClient(url, timeout_seconds=timeout)
    try:
        result = import_range(session_factory(_engine(_settings())), client, begin, finish, options)
    except PrometheusError as exc:
        typer.echo(f"error: {exc}", err=True)
        typer.echo("the query windows before it are stored; pulling the range again adds nothing twice", err=True)
        raise typer.Exit(1) from exc
    finally:
        client.close()
    typer.echo(
        f"pulled {result.readings} readings of {len(result.gpus)} GPUs on {len(result.nodes)} nodes "
        f"in {result.chunks} query windows; {result.mig_readings} MIG instance readings left out"
    )


@import_app.command("pods")
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
) -> None:
    """Import Kubernetes pods that hold NVIDIA GPUs (nvidia.com/gpu, nvidia.com/mig-<profile>) as jobs."""
    from finops.db.engine import session_factory
    from finops.jobs.kubernetes import KubernetesFormatError, load_document, parse_nodes
    from finops.jobs.kubernetes_import import import_pods
    from finops.timeutil import utc_now

    at = _instant(listed_at, "--listed-at") if listed_at else utc_now()
    engine = _engine(_settings())
    source = "<stdin>" if file == "-" else file
    try:
        text = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
        node_labels: dict[str, dict[str, str]] | None = None
        node_errors: list[str] = []
        if nodes is not None:
            node_labels, node_errors = parse_nodes(
                load_document(nodes.read_bytes(), source=str(nodes)), source=str(nodes)
            )
        document = load_document(text, source=source)
        with session_factory(engine).begin() as session:
            result = import_pods(
                session, document, source=source, listed_at=at, cluster=cluster, complete=complete, nodes=node_labels
            )
    except OSError as exc:
        typer.echo(f"error: {exc.filename}: {exc.strerror}", err=True)
        raise typer.Exit(2) from exc
    except KubernetesFormatError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    for message in node_errors:
        typer.echo(f"skipped {message}", err=True)
    for error in result.errors:
        typer.echo(f"skipped {error.message}", err=True)
    typer.echo(
        f"imported {result.jobs} GPU pods; {result.without_gpus} without GPUs; {result.not_started} not started; "
        f"{result.ended_missing} ended as gone; {result.nodes_labelled} node labels; {len(result.errors)} bad pods"
    )
    if result.errors or node_errors:
        raise typer.Exit(1)


@team_app.command("map")
def team_map(account: str, team: str) -> None:
    """Map Slurm ACCOUNT to TEAM (jobs already imported move too)."""
    from finops.db.engine import session_factory
    from finops.jobs.teams import map_account

    with session_factory(_engine(_settings())).begin() as session:
        moved = map_account(session, account, team)
    typer.echo(f"account {account} → team {team}; {moved} jobs moved")


rule_app = typer.Typer(
    help="Team rules: a Slurm account, Kubernetes namespace or Kubernetes label key=value → team; a job takes the "
    "team of its first matching rule, label before namespace before account, else __unmapped__.",
    no_args_is_help=True,
)
team_app.add_typer(rule_app, name="rule")

_RULE_KIND = typer.Option("--kind", help="account, namespace or label.")
_RULE_KEY = typer.Option("--key", help="The label name, for --kind label (e.g. team).")


def _rule_text(kind: str, key: str, value: str) -> str:
    return f"label {key}={value}" if kind == "label" else f"{kind} {value}"


@rule_app.command("set")
def team_rule_set(
    value: Annotated[str, typer.Argument(help="Account name, namespace, or label value.")],
    team: Annotated[str, typer.Argument(help="Team name (created if new).")],
    kind: Annotated[str, _RULE_KIND],
    key: Annotated[str, _RULE_KEY] = "",
) -> None:
    """Map VALUE (of the given kind) to TEAM, replacing the rule for the same selector; jobs already imported move."""
    from finops.db.engine import session_factory
    from finops.jobs.teams import set_rule

    with session_factory(_engine(_settings())).begin() as session:
        try:
            moved = set_rule(session, kind, key, value, team)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--kind/--key") from exc
    typer.echo(f"{_rule_text(kind, key, value)} → team {team}; {moved} jobs moved")


@rule_app.command("delete")
def team_rule_delete(
    value: Annotated[str, typer.Argument(help="Account name, namespace, or label value.")],
    kind: Annotated[str, _RULE_KIND],
    key: Annotated[str, _RULE_KEY] = "",
) -> None:
    """Delete the rule for VALUE (of the given kind); the jobs it decided take their next matching rule."""
    from finops.db.engine import session_factory
    from finops.jobs.teams import delete_rule, find_rule

    with session_factory(_engine(_settings())).begin() as session:
        try:
            rule = find_rule(session, kind, key, value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--kind/--key") from exc
        if rule is None:
            typer.echo(f"error: no rule for {_rule_text(kind, key, value)}", err=True)
            raise typer.Exit(1)
        moved = delete_rule(session, kind, key, value)
    typer.echo(f"deleted {_rule_text(kind, key, value)} → team {rule.team}; {moved} jobs moved")


@rule_app.command("list")
def team_rule_list() -> None:
    """Every team rule, in the order they are tried (label, namespace, account)."""
    from finops.db.engine import session_factory
    from finops.jobs.teams import list_rules

    with session_factory(_engine(_settings()))() as session:
        rules = list_rules(session)
    lines = [f"{'kind':<10} {'key':<24} {'value':<32} team"]
    lines += [f"{r.kind:<10} {r.key or '-':<24} {r.value:<32} {r.team}" for r in rules]
    typer.echo("\n".join(lines))


@budget_app.command("set")
def budget_set(
    team: str,
    amount: str,
    month: Annotated[str | None, typer.Option(help="Month as YYYY-MM (default: this month, UTC).")] = None,
) -> None:
    """Set TEAM's budget for a month to AMOUNT (in the price catalog's currency)."""
    from finops.analysis.budgets import set_budget
    from finops.db.engine import session_factory
    from finops.timeutil import utc_now

    try:
        value = Decimal(amount)
    except InvalidOperation as exc:
        raise typer.BadParameter(f"{amount!r} is not a decimal amount", param_hint="AMOUNT") from exc
    at = _instant(f"{month}-01T00:00:00+00:00", "--month") if month else utc_now()
    settings = _settings()
    currency = _pricing(settings).catalog.currency
    with session_factory(_engine(settings)).begin() as session:
        budget = set_budget(session, team, value, at, currency)
    typer.echo(f"budget of {team} for {budget.month:%Y-%m}: {budget.amount:.2f} {currency}")


@budget_app.command("status")
def budget_status_command() -> None:
    """Month-to-date spend, % of budget and run-rate forecast for every team with a budget."""
    from finops.analysis.budgets import budget_status
    from finops.db.engine import session_factory
    from finops.timeutil import utc_now

    with session_factory(_engine(_settings()))() as session:
        statuses = budget_status(session, utc_now())
    typer.echo(_budget_table(statuses))


def _budget_table(statuses: list[BudgetStatus]) -> str:
    lines = [f"{'team':<16} {'budget':>14} {'spent MTD':>14} {'used %':>7} {'forecast':>14}"]
    for s in statuses:
        lines.append(f"{s.team:<16} {s.budget:>14,.2f} {s.spent:>14,.2f} {s.used_percent:>7} {s.forecast:>14,.2f}")
    return "\n".join(lines)


@prices_app.command("list")
def prices_list() -> None:
    """The catalog in force (newest import, else FINOPS_PRICE_CATALOG): one line per price row, currency per
    GPU-hour, on-prem rows computed from their parts."""
    from finops.db.engine import session_factory
    from finops.pricing.catalog import OnPremRow
    from finops.pricing.store import catalog_in_force

    settings = _settings()
    with session_factory(_engine(settings))() as session:
        catalog = catalog_in_force(session, _pricing(settings).catalog)
    typer.echo(f"{'model':<18} {'pricing model':<13} {'from':<10} {catalog.currency + '/GPU-h':>10}  source")
    for key, model in sorted(catalog.models.items()):
        for row in sorted(model.prices, key=lambda r: (r.pricing_model, r.effective_from)):
            rate = catalog.parts_of(row).total if isinstance(row, OnPremRow) else row.rate
            typer.echo(f"{key:<18} {row.pricing_model:<13} {row.effective_from} {rate:>10.4f}  {row.sources[0].url}")


@prices_app.command("import")
def prices_import(
    file: Annotated[Path, typer.Argument(help="Price catalog YAML (format: finops/pricing/price_catalog.yaml).")],
) -> None:
    """Validate a catalog and put it in force; ledger hours it prices differently are rebuilt on the next rollup."""
    from finops.db.engine import session_factory
    from finops.pricing.catalog import CatalogError
    from finops.pricing.store import import_catalog

    settings = _settings()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        typer.echo(f"error: {file}: {exc.strerror}", err=True)
        raise typer.Exit(2) from exc
    try:
        with session_factory(_engine(settings)).begin() as session:
            changed_from = import_catalog(session, text, str(file), _pricing(settings).catalog)
    except CatalogError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"imported {file}; " + (f"ledger re-priced from {changed_from}" if changed_from else "no price changed"))


def _selector(node: str | None, partition: str | None, node_label: str | None) -> tuple[str, str, str]:
    chosen = [
        (name, value) for name, value in (("node", node), ("partition", partition), ("node_label", node_label)) if value
    ]
    if len(chosen) != 1:
        raise typer.BadParameter("give exactly one of --node, --partition, --node-label")
    selector, value = chosen[0]
    if selector != "node_label":
        return selector, "", value
    key, sep, label_value = value.partition("=")
    if not sep or not key:
        raise typer.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="--node-label")
    return selector, key, label_value


@prices_app.command("assign")
def prices_assign(
    pricing_model: Annotated[str, typer.Argument(help="on-demand, reserved, spot or on-prem.")],
    node: Annotated[str | None, typer.Option(help="A hostname.")] = None,
    partition: Annotated[str | None, typer.Option(help="A Slurm partition.")] = None,
    node_label: Annotated[str | None, typer.Option(help="A Kubernetes node label KEY=VALUE.")] = None,
) -> None:
    """Bill the GPUs of a node, a partition's nodes or labelled nodes under PRICING_MODEL (the ledger is re-priced)."""
    from finops.db.engine import session_factory
    from finops.pricing.catalog import PricingModel
    from finops.pricing.rules import set_pricing_rule

    try:
        model = PricingModel(pricing_model)
    except ValueError as exc:
        raise typer.BadParameter(f"must be one of {', '.join(PricingModel)}", param_hint="PRICING_MODEL") from exc
    selector, key, value = _selector(node, partition, node_label)
    with session_factory(_engine(_settings())).begin() as session:
        set_pricing_rule(session, selector, key, value, model)
    typer.echo(f"{selector} {key + '=' if key else ''}{value} → {model}")


@prices_app.command("unassign")
def prices_unassign(
    node: Annotated[str | None, typer.Option(help="A hostname.")] = None,
    partition: Annotated[str | None, typer.Option(help="A Slurm partition.")] = None,
    node_label: Annotated[str | None, typer.Option(help="A Kubernetes node label KEY=VALUE.")] = None,
) -> None:
    """Remove a pricing rule: those nodes go back to FINOPS_PRICING_MODEL (the ledger is re-priced)."""
    from finops.db.engine import session_factory
    from finops.pricing.rules import delete_pricing_rule

    selector, key, value = _selector(node, partition, node_label)
    with session_factory(_engine(_settings())).begin() as session:
        delete_pricing_rule(session, selector, key, value)
    typer.echo(f"{selector} {key + '=' if key else ''}{value} → default pricing model")


@prices_app.command("rules")
def prices_rules() -> None:
    """The pricing rules in resolution order (node, node label, partition)."""
    from finops.db.engine import session_factory
    from finops.pricing.rules import list_pricing_rules

    settings = _settings()
    with session_factory(_engine(settings))() as session:
        rules = list_pricing_rules(session)
    for rule in rules:
        typer.echo(f"{rule.selector:<10} {rule.key + '=' if rule.key else ''}{rule.value:<30} {rule.pricing_model}")
    typer.echo(f"(anything else: {settings.pricing_model})")


@app.command()
def rollup() -> None:
    """Run the scheduled work once: rebuild dirty ledger hours, re-judge recent idle episodes."""
    from finops.db.engine import session_factory
    from finops.service.scheduler import run_rollup

    settings = _settings()
    policy = _idle_policy(settings)
    hours, episodes = run_rollup(session_factory(_engine(settings)), _pricing(settings), policy)
    typer.echo(f"{hours} ledger hours rebuilt; {episodes} idle episodes")


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
    so the report equals the dashboard's for the same period and filters."""
    import orjson

    from finops.analysis.budgets import budget_status
    from finops.analysis.report import GROUP_BYS, cost_report, report_csv, report_dicts, report_table
    from finops.db.engine import session_factory
    from finops.timeutil import utc_now

    group = next((g for g in GROUP_BYS if g == by), None)
    if group is None:
        raise typer.BadParameter(f"must be one of {', '.join(GROUP_BYS)}", param_hint="--by")
    if output_format not in ("table", "json", "csv"):
        raise typer.BadParameter("must be table, json or csv", param_hint="--format")
    with session_factory(_engine(_settings()))() as session:
        rows = cost_report(
            session,
            _instant(start, "--start"),
            _instant(end, "--end"),
            group,
            cluster=cluster,
            team=team,
            partition=partition,
        )
        statuses = budget_status(session, utc_now(), team=team) if output_format == "table" else []
    if output_format == "json":
        typer.echo(orjson.dumps(report_dicts(rows, group), option=orjson.OPT_INDENT_2).decode())
    elif output_format == "csv":
        typer.echo(report_csv(rows, group), nl=False)
    else:
        typer.echo(report_table(rows, group))
        if statuses:
            scope = " (whole teams: all clusters and partitions)" if cluster or partition else ""
            typer.echo(f"\nBudgets, month to date{scope}:\n{_budget_table(statuses)}")


@app.command()
def dashboard(
    port: Annotated[int, typer.Option(help="TCP port of the Streamlit server.")] = 8501,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Serve the Streamlit dashboard on the configured database."""
    from finops.service.dashboard_server import serve_dashboard

    _engine(_settings())
    serve_dashboard(host, port)


@app.command()
def demo(
    trace: Annotated[
        str | None,
        typer.Option(
            help="helios:DIR replays the real Helios week in DIR "
            "(default: the one in FINOPS_SHARED_DATA, else a synthetic week)."
        ),
    ] = None,
    headless: Annotated[bool, typer.Option(help="Exit after the report instead of serving the dashboard.")] = False,
    report_json: Annotated[Path | None, typer.Option(help="Write the team report as JSON here.")] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Database for the demo (default: a fresh SQLite file in the data dir).")
    ] = None,
    dashboard_port: Annotated[int, typer.Option(help="Port of the dashboard after the report.")] = 8501,
    minutes: Annotated[int | None, typer.Option(min=1, help="Replay only the first N minutes of the week.")] = None,
) -> None:
    """Replay a GPU-cluster week through collector → service → ledger → report → dashboard."""
    from finops.demo.runner import DemoOptions, run_demo

    settings = _settings()
    if trace is not None and not trace.startswith("helios:"):
        raise typer.BadParameter("expected helios:DIR", param_hint="--trace")
    if trace is not None:
        helios_dir: Path | None = Path(trace.removeprefix("helios:"))
    else:
        default = settings.shared_data / "helios-earth-vc-allocation"
        helios_dir = default if default.is_dir() else None
        if helios_dir is None:
            typer.echo(f"note: no Helios trace at {default} (FINOPS_SHARED_DATA); using the synthetic week")
    options = DemoOptions(
        helios_dir=helios_dir,
        headless=headless,
        report_json=report_json,
        database_url=database_url or f"sqlite:///{(settings.data_dir / 'demo.sqlite').resolve()}",
        dashboard_port=dashboard_port,
        price_catalog=settings.price_catalog,
        pricing_model=settings.pricing_model,
        shared_data=settings.shared_data,
        work_dir=settings.data_dir,
        minutes=minutes,
    )
    raise typer.Exit(run_demo(options))


export_app = typer.Typer(help="Export the ledger in standard cost formats.", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("focus")
def export_focus_command(
    start: Annotated[str, typer.Option(help="First hour, ISO 8601 on a whole hour (UTC if no offset).")],
    end: Annotated[str, typer.Option(help="End hour (exclusive), ISO 8601 on a whole hour.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="FILE.csv or FILE.parquet to write.")],
    provider: Annotated[
        str, typer.Option(help="ProviderName, PublisherName and InvoiceIssuerName: who runs the GPUs.")
    ] = "GPU cluster",
    billing_account: Annotated[str, typer.Option(help="BillingAccountId and BillingAccountName.")] = "gpu-cluster",
    region: Annotated[str | None, typer.Option(help="RegionId and RegionName (default: null).")] = None,
) -> None:
    """FinOps FOCUS 1.2 cost and usage rows for ledger hours [start, end): one per GPU, hour and holder,
    unallocated capacity included, so the BilledCost adds up to the ledger's allocated cost."""
    from finops.db.engine import session_factory
    from finops.export.focus import FocusAccount, FocusExportError, check_period, export_focus, output_format
    from finops.pricing.store import pricing_in_force

    try:
        output_format(output)
    except FocusExportError as exc:
        raise typer.BadParameter(str(exc), param_hint="--output/-o") from exc
    begin, finish = _instant(start, "--start"), _instant(end, "--end")
    try:
        check_period(begin, finish)
    except FocusExportError as exc:
        hint = "--start" if str(exc).startswith("start") else "--end"
        raise typer.BadParameter(str(exc), param_hint=hint) from exc
    settings = _settings()
    account = FocusAccount(provider=provider, billing_account=billing_account, region=region)
    with session_factory(_engine(settings))() as session:
        try:
            done = export_focus(session, begin, finish, pricing_in_force(session, _pricing(settings)), output, account)
        except FocusExportError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
    total = f"{done.billed_cost:f} {done.currency}" if done.currency else "0"
    typer.echo(f"{done.rows} FOCUS 1.2 rows written to {output}; BilledCost total {total}")
