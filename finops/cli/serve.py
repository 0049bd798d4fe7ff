"""The long-running service processes: ``gpu-finops serve`` (ingest and REST API, by default with the
scheduled jobs), ``gpu-finops scheduler`` (the scheduled jobs alone) and ``gpu-finops dashboard`` (Streamlit);
and the scheduled jobs the settings switch on (Prometheus pull, sacct import, alert rules)."""

from __future__ import annotations

import logging
import threading
from typing import Annotated

import typer
import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry, start_http_server
from sqlalchemy.orm import Session, sessionmaker

from alerts.service import AlertRunner, AlertService
from finops.access.api_tokens import any_live_token as api_token_exists
from finops.cli.context import idle_policy, load_pricing, load_settings, open_engine, open_sessions
from finops.errors import FinopsError
from finops.ingest.limits import IngestLimits
from finops.ingest.node_tokens import any_live_token
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions, ScheduledPull
from finops.jobs.slurm_import import ScheduledSacct
from finops.pricing.catalog import Pricing
from finops.service.cost_metrics import CostMetrics
from finops.service.dashboard_server import require_dashboard_extra, serve_dashboard
from finops.service.scheduler import start_scheduler
from finops.settings import Settings
from finops.timeutil import utc_now
from finops.web.app import ServiceMetrics, create_app

app = typer.Typer()
log = logging.getLogger(__name__)

SHARED_TOKEN_WARNING = (
    "FINOPS_INGEST_TOKEN is set: this shared token admits batches of every node, so one leaked copy can write any "
    "node's readings. To move to per-node tokens: `gpu-finops nodes token create NODE` for each node, give each "
    "collector its own token (collector --token-file), then unset FINOPS_INGEST_TOKEN and restart"
)


def prometheus_pull(settings: Settings) -> ScheduledPull | None:
    """The scheduled Prometheus pull when ``FINOPS_PROMETHEUS_URL`` is set, else None.
    FinopsError for a ``FINOPS_PROMETHEUS_SELECTOR`` that is not label matchers in braces."""
    if not settings.prometheus_url:
        return None
    try:
        options = PullOptions(step_seconds=settings.prometheus_step_seconds, selector=settings.prometheus_selector)
    except ValueError as exc:
        raise FinopsError(f"FINOPS_PROMETHEUS_SELECTOR: {exc}") from exc
    return ScheduledPull(PrometheusClient(settings.prometheus_url), options, settings.rollup_interval_seconds)


def scheduled_sacct(settings: Settings) -> ScheduledSacct | None:
    """The scheduled sacct import when ``FINOPS_SACCT_SCHEDULE_SECONDS`` is set, else None."""
    if not settings.sacct_schedule_seconds:
        return None
    return ScheduledSacct(
        command=settings.sacct_command,
        cluster=settings.sacct_cluster,
        interval_seconds=settings.sacct_schedule_seconds,
        overlap_seconds=settings.sacct_overlap_seconds,
        lookback_seconds=settings.sacct_lookback_seconds,
        timeout_seconds=settings.sacct_timeout_seconds,
    )


def _start_jobs(
    settings: Settings, sessions: sessionmaker[Session], pricing: Pricing, registry: CollectorRegistry
) -> BackgroundScheduler:
    """Start the scheduled jobs of the settings; the caller shuts the scheduler down.
    AlertConfigError (a FinopsError) for an alert rules file that cannot be read or is invalid."""
    return start_scheduler(
        sessions,
        pricing,
        idle_policy(settings),
        CostMetrics(registry),
        settings.rollup_interval_seconds,
        prometheus=prometheus_pull(settings),
        sacct=scheduled_sacct(settings),
        sample_retention_days=settings.sample_retention_days,
        alerts=AlertRunner(AlertService.from_settings(settings), sessions),
    )


def ingest_limits(settings: Settings) -> IngestLimits:
    """What ingest accepts of a node, from the settings."""
    return IngestLimits(
        retention_days=settings.sample_retention_days,
        readings_per_second=settings.ingest_readings_per_second,
        readings_burst=settings.ingest_readings_burst,
        max_gpus_per_batch=settings.ingest_max_gpus_per_batch,
        body_timeout_seconds=settings.ingest_body_timeout_seconds,
    )


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    scheduler: Annotated[bool, typer.Option(help="Run the rollup and budget jobs in this process.")] = True,
    insecure_no_token: Annotated[
        bool,
        typer.Option(
            help="Accept requests without a bearer token (only when no token exists: shared, per-node or API)."
        ),
    ] = False,
) -> None:
    """Run the service: ingest API, /healthz, /metrics and (by default) the scheduled jobs.

    Collectors authenticate with per-node tokens (`nodes token create`) or the shared FINOPS_INGEST_TOKEN (which
    admits every node: logged as a warning at start); with neither, serve refuses to start unless
    --insecure-no-token. The REST API, /metrics and /docs take API tokens (`api-token create`) or FINOPS_API_TOKEN
    (an admin), never an ingest credential: serve refuses to start when FINOPS_API_TOKEN equals FINOPS_INGEST_TOKEN."""
    settings = load_settings()
    sessions = open_sessions(settings)
    token = settings.ingest_token.get_secret_value() if settings.ingest_token else None
    api_token = settings.api_token.get_secret_value() if settings.api_token else None
    if token is not None and token == api_token:
        raise FinopsError(
            "FINOPS_API_TOKEN equals FINOPS_INGEST_TOKEN: an ingest credential must not open the REST API; "
            "give the API its own token (or make role tokens with `gpu-finops api-token create`)"
        )
    with sessions() as session:
        now = utc_now()
        node_tokens, api_tokens = any_live_token(session, now), api_token_exists(session, now)
    if token is None and not node_tokens and not insecure_no_token:
        raise FinopsError(
            "no ingest token: make per-node tokens with `gpu-finops nodes token create NODE`, or set "
            "FINOPS_INGEST_TOKEN or FINOPS_INGEST_TOKEN_FILE (or pass --insecure-no-token)"
        )
    insecure = insecure_no_token and token is None and not node_tokens and api_token is None and not api_tokens
    if insecure_no_token and not insecure:
        log.warning("--insecure-no-token ignored: tokens exist, every request requires one")
    if token is not None:
        log.warning(SHARED_TOKEN_WARNING)
    if api_token is None and not api_tokens and not insecure:
        log.warning(
            "no API token (`gpu-finops api-token create`, or FINOPS_API_TOKEN): the REST API, /metrics and /docs "
            "refuse every request until one is made"
        )
    metrics = ServiceMetrics()
    pricing = load_pricing(settings)
    running = _start_jobs(settings, sessions, pricing, metrics.registry) if scheduler else None
    try:
        uvicorn.run(
            create_app(
                sessions,
                token,
                metrics,
                api_token,
                pricing.catalog,
                limits=ingest_limits(settings),
                insecure_no_token=insecure,
            ),
            host=host,
            port=port,
            log_level="warning",
        )
    finally:
        if running is not None:
            running.shutdown(wait=False)


@app.command()
def scheduler(
    metrics_port: Annotated[int, typer.Option(help="Port of this process's /metrics (budget gauges).")] = 8081,
    metrics_address: Annotated[str, typer.Option(help="Address /metrics listens on.")] = "127.0.0.1",
) -> None:
    """Run only the scheduled jobs (ledger rollup, idle detection, budget gauges), apart from `serve --no-scheduler`."""
    settings = load_settings()
    registry = CollectorRegistry()
    running = _start_jobs(settings, open_sessions(settings), load_pricing(settings), registry)
    start_http_server(metrics_port, addr=metrics_address, registry=registry)
    try:
        threading.Event().wait()
    finally:
        running.shutdown(wait=False)


@app.command()
def dashboard(
    port: Annotated[int, typer.Option(help="TCP port of the Streamlit server.")] = 8501,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Serve the Streamlit dashboard on the configured database."""
    require_dashboard_extra("dashboard")
    open_engine(load_settings())
    serve_dashboard(host, port)
