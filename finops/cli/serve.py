"""The long-running service processes: ``gpu-finops serve`` (ingest and REST API, by default with the
scheduled jobs), ``gpu-finops scheduler`` (the scheduled jobs alone) and ``gpu-finops dashboard`` (Streamlit);
and the scheduled jobs the settings switch on (Prometheus pull, sacct import, alert rules, nudges).

Shutdown of ``serve`` and ``scheduler`` on SIGTERM or SIGINT (:func:`finops.service.http_server.serve_http`): the
scheduled jobs' database work is stopped at once (their engine's :class:`finops.db.stopping.StopSwitch`: a rollup
under way rolls back, which also frees SQLite's write lock for the requests waiting on it), uvicorn stops taking
connections and waits at most :data:`~finops.service.http_server.SHUTDOWN_SECONDS` for the requests under way, then
at most as long again for the jobs' runs to end, and the process exits 0. A run still going then (a job outside the
database, such as a webhook call) is left behind: the process ends with exit code 1 without it, having committed
nothing of it. The leases of the jobs (PostgreSQL) are ended at the signal, so that another process takes them at
its next renewal.

Requests run on an engine of their own (:func:`request_sessions`: on PostgreSQL, a lock waited for longer than
``FINOPS_REQUEST_LOCK_TIMEOUT_SECONDS`` gets 503), the scheduled jobs on another (no lock timeout).
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
import shutil
import socket
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker
from uvicorn.supervisors import Multiprocess

from alerts.nudges import NudgeRunner, NudgeService
from alerts.service import AlertRunner, AlertService
from finops.access.api_tokens import any_live_token as api_token_exists
from finops.cli.context import idle_policy, load_pricing, load_settings, open_engine, tsdb_telemetry
from finops.db.engine import session_factory
from finops.db.stopping import StopSwitch
from finops.errors import FinopsError
from finops.ingest.limits import IngestLimits
from finops.ingest.node_tokens import any_live_token
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions, ScheduledPull
from finops.jobs.slurm_import import ScheduledSacct
from finops.pricing.catalog import Pricing
from finops.service.cost_metrics import CostMetrics
from finops.service.dashboard_server import check_listen_address, require_dashboard_extra, serve_dashboard
from finops.service.heap import settle_heap
from finops.service.http_server import SHUTDOWN_SECONDS, HttpProtocol, serve_http
from finops.service.leases import job_leases
from finops.service.scheduler import RunningJobs, start_scheduler
from finops.service.tls import check_server_tls, is_loopback
from finops.settings.combined import Settings
from finops.settings.sources import DEFAULT_SACCT_SCHEDULE_SECONDS
from finops.timeutil import utc_now
from finops.web.app import create_app, create_metrics_app
from finops.web.auth import ApiAuth
from finops.web.ingest_route import ServiceMetrics

app = typer.Typer()
log = logging.getLogger(__name__)

SHARED_TOKEN_WARNING = (
    "FINOPS_INGEST_TOKEN is set: this shared token admits batches of every node, so one leaked copy can write any "
    "node's readings. To move to per-node tokens: `gpu-finops nodes token create NODE` for each node, give each "
    "collector its own token (collector --token-file), then unset FINOPS_INGEST_TOKEN and restart"
)

PLAIN_HTTP_WARNING = (
    "serving plain HTTP on %s: bearer tokens and readings travel in clear text. Give serve a certificate "
    "(--tls-cert and --tls-key, or FINOPS_TLS_CERT_FILE and FINOPS_TLS_KEY_FILE), or listen on 127.0.0.1 behind a "
    "TLS-terminating reverse proxy (docs/deployment.md, TLS)"
)
TLS_CERT = "a TLS certificate (--tls-cert or FINOPS_TLS_CERT_FILE)"
TLS_KEY = "a TLS private key (--tls-key or FINOPS_TLS_KEY_FILE)"


def prometheus_pull(settings: Settings) -> ScheduledPull | None:
    """The scheduled Prometheus pull when ``FINOPS_PROMETHEUS_URL`` is set and readings are stored in the database
    (``FINOPS_TELEMETRY_SOURCE=database``), else None. FinopsError for a ``FINOPS_PROMETHEUS_SELECTOR`` that is not
    label matchers in braces."""
    if not settings.prometheus_url or settings.telemetry_source == "tsdb":
        return None
    try:
        options = PullOptions(step_seconds=settings.prometheus_step_seconds, selector=settings.prometheus_selector)
    except ValueError as exc:
        raise FinopsError(f"FINOPS_PROMETHEUS_SELECTOR: {exc}") from exc
    return ScheduledPull(PrometheusClient(settings.prometheus_url), options, settings.rollup_interval_seconds)


def scheduled_sacct(settings: Settings) -> ScheduledSacct | None:
    """The scheduled sacct import, every ``FINOPS_SACCT_SCHEDULE_SECONDS``; unset, every
    :data:`~finops.settings.sources.DEFAULT_SACCT_SCHEDULE_SECONDS` when sacct can be run here
    (``FINOPS_SACCT_COMMAND`` is set, or its program, ``sacct`` by default, is on the PATH); else None. Logs at
    start, in one line, whether and how Slurm jobs are imported, and how to change it; a WARNING when the command's
    program is not on the PATH."""
    seconds = settings.sacct_schedule_seconds
    program = shlex.split(settings.sacct_command)[0]
    found = shutil.which(program) is not None
    if seconds is None:
        seconds = DEFAULT_SACCT_SCHEDULE_SECONDS if found or "sacct_command" in settings.model_fields_set else 0
        if not seconds:
            log.info(
                "Slurm jobs are not imported on a schedule: %s is not on the PATH and FINOPS_SACCT_COMMAND is not set "
                "(set it, e.g. 'ssh -i /keys/id_ed25519 slurm@slurm-head sacct': docs/deployment.md, Slurm jobs in "
                "containers; FINOPS_SACCT_SCHEDULE_SECONDS=0 says there is no Slurm)",
                program,
            )
            return None
    if not seconds:
        log.info("Slurm jobs are not imported on a schedule (FINOPS_SACCT_SCHEDULE_SECONDS=0)")
        return None
    if not found:
        log.warning("FINOPS_SACCT_COMMAND: %s is not on the PATH; every scheduled sacct import will fail", program)
    log.info("Slurm jobs imported every %d s with: %s", seconds, settings.sacct_command)
    return ScheduledSacct(
        command=settings.sacct_command,
        cluster=settings.sacct_cluster,
        interval_seconds=seconds,
        overlap_seconds=settings.sacct_overlap_seconds,
        lookback_seconds=settings.sacct_lookback_seconds,
        timeout_seconds=settings.sacct_timeout_seconds,
    )


class ScheduledJobs:
    """The scheduled jobs of the settings, on an engine of their own (whose statements the shutdown stops, and no
    request's), under job leases on PostgreSQL (several processes may run them: each job runs on its lease's holder,
    :mod:`finops.service.leases`). Made before the server starts, started by :meth:`start` once it listens with its
    signal handlers in place (:func:`serve_http`'s ``started``); :meth:`stopping` at the signal, then :meth:`stop`,
    end them, whether they were started or not."""

    def __init__(self, settings: Settings, pricing: Pricing, registry: CollectorRegistry) -> None:
        """Make them, not started. AlertConfigError (a FinopsError) for an alert rules file or a nudge recipients file
        that cannot be read or is invalid; FinopsError for a bad ``FINOPS_PROMETHEUS_SELECTOR``."""
        engine = open_engine(settings)
        sessions = session_factory(engine)
        self.running = RunningJobs(StopSwitch(engine))
        self.leases = job_leases(sessions, settings.job_lease_seconds, registry)
        self.scheduler: BackgroundScheduler | None = None
        self._start_scheduler = functools.partial(
            start_scheduler,
            sessions,
            pricing,
            idle_policy(settings),
            CostMetrics(registry),
            settings.rollup_interval_seconds,
            prometheus=prometheus_pull(settings),
            sacct=scheduled_sacct(settings),
            sample_retention_days=settings.sample_retention_days,
            alerts=AlertRunner(AlertService.from_settings(settings), sessions),
            nudges=NudgeRunner(NudgeService.from_settings(settings), sessions),
            running=self.running,
            leases=self.leases,
            tsdb=tsdb_telemetry(settings),
        )

    def start(self) -> None:
        """Start the scheduler: the jobs due at start run at once."""
        self.scheduler = self._start_scheduler()

    def stopping(self) -> None:
        """At the signal: hand the leases over (another process takes them at its next renewal; a run here can no
        longer commit), then stop the runs' database work (none can start once it is stopped)."""
        if self.leases is not None:
            self.leases.release()
        self.running.switch.stop()

    def stop(self) -> None:
        """Start no more runs, stop the database work of those under way and wait at most :data:`SHUTDOWN_SECONDS`
        for them to end; if one is still going then, end the process at once with exit code 1 (the interpreter
        would otherwise wait for it at exit), its transaction uncommitted. Nothing to do when never started."""
        if self.scheduler is None:
            return
        self.scheduler.shutdown(wait=False)
        if not self.running.stop(SHUTDOWN_SECONDS):
            log.error("scheduled jobs still running %.0f s into the shutdown: exiting without them", SHUTDOWN_SECONDS)
            logging.shutdown()
            os._exit(1)


def request_sessions(settings: Settings) -> sessionmaker[Session]:
    """Sessions of the web app's requests (see :func:`finops.cli.context.open_engine`), on an engine of their own.
    On PostgreSQL each of its connections gets ``lock_timeout`` = ``FINOPS_REQUEST_LOCK_TIMEOUT_SECONDS`` (unless 0):
    a request behind a lock another transaction holds fails with ``LockNotAvailable`` once it runs out, which the
    app answers 503 with ``Retry-After`` (:mod:`finops.web.app`), instead of waiting as long as the lock is held.
    The scheduled jobs' engine (:class:`ScheduledJobs`) has no such timeout."""
    engine = open_engine(settings)
    milliseconds = round(settings.request_lock_timeout_seconds * 1000)
    if engine.dialect.name == "postgresql" and milliseconds:

        @event.listens_for(engine, "connect")
        def _lock_timeout(dbapi_connection: Any, _record: Any) -> None:
            with dbapi_connection.cursor() as cursor:
                cursor.execute(f"SET lock_timeout = {max(milliseconds, 1)}")
            dbapi_connection.commit()  # a session setting: kept once committed, for the connection's life

        engine.dispose()  # the connection open_engine checked the migrations on predates the setting
    return session_factory(engine)


def ingest_limits(settings: Settings) -> IngestLimits:
    """What ingest accepts of a node, from the settings."""
    return IngestLimits(
        retention_days=settings.sample_retention_days,
        readings_per_second=settings.ingest_readings_per_second,
        readings_burst=settings.ingest_readings_burst,
        max_gpus_per_batch=settings.ingest_max_gpus_per_batch,
        max_gpus_per_node=settings.ingest_max_gpus_per_node,
        body_timeout_seconds=settings.ingest_body_timeout_seconds,
        body_memory_budget_bytes=settings.body_memory_budget_bytes,
    )


def tls_files(settings: Settings, cert_file: Path | None, key_file: Path | None) -> tuple[Path, Path] | None:
    """The (certificate chain, private key) PEM files ``serve`` speaks HTTPS with: the options, else
    ``FINOPS_TLS_CERT_FILE`` and ``FINOPS_TLS_KEY_FILE``; None when neither is set (plain HTTP).
    FinopsError when only one of the two is set, or a file cannot be used (:func:`check_server_tls`)."""
    cert = cert_file or settings.tls_cert_file
    key = key_file or settings.tls_key_file
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = (TLS_CERT, TLS_KEY) if key is None else (TLS_KEY, TLS_CERT)
        raise FinopsError(f"{given} is set but not {missing}: give both for HTTPS, or neither for plain HTTP")
    check_server_tls(cert, key)
    return cert, key


def _secrets(settings: Settings) -> tuple[str | None, str | None]:
    """(shared ingest token, ``FINOPS_API_TOKEN``), each None when unset."""
    token = settings.ingest_token.get_secret_value() if settings.ingest_token else None
    api_token = settings.api_token.get_secret_value() if settings.api_token else None
    return token, api_token


def _serve_workers(workers: int, listen: dict[str, Any]) -> None:
    """``workers`` processes of :func:`worker_app` answering on one listening socket (uvicorn's supervisor) until
    SIGTERM or SIGINT. The socket has ``TCP_NODELAY``, which the connections accepted on it inherit: the
    processes get it as a socket rebuilt from its descriptor, on which asyncio does not set it, and without it a
    response written in two parts waits for the client's delayed ACK (about 40 ms)."""
    config = uvicorn.Config(
        f"{__name__}:worker_app", factory=True, workers=workers, http=HttpProtocol,
        timeout_graceful_shutdown=int(SHUTDOWN_SECONDS), **listen,
    )  # fmt: skip
    listening = config.bind_socket()
    listening.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    Multiprocess(config, sockets=[listening]).run()


def worker_app() -> FastAPI:
    """The service's application built from the settings alone: the factory each process of ``serve --workers N``
    (N > 1) imports (``finops.cli.serve:worker_app``), after the parent has checked the credentials. Each process
    has its own connection pool, metrics and per-node token buckets, and settles its heap before it serves
    (:func:`finops.service.heap.settle_heap`)."""
    settings = load_settings()
    token, api_token = _secrets(settings)
    catalog = load_pricing(settings).catalog
    limits = ingest_limits(settings)
    app = create_app(
        request_sessions(settings), token, ServiceMetrics(), api_token, catalog, limits=limits,
        readings_in_tsdb=settings.telemetry_source == "tsdb",
        reasons=settings.reason_policy, efficiency=settings.efficiency_policy,
    )  # fmt: skip
    settle_heap()
    return app


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    scheduler: Annotated[bool, typer.Option(help="Run the rollup and budget jobs in this process.")] = True,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Server processes sharing the port (more than 1 needs --no-scheduler and a credential; each process "
            "counts its own per-node ingest rate and /metrics).",
        ),
    ] = 1,
    insecure_no_token: Annotated[
        bool,
        typer.Option(
            help="Accept requests without a bearer token (only when no token exists: shared, per-node or API)."
        ),
    ] = False,
    tls_cert: Annotated[
        Path | None,
        typer.Option(help="PEM certificate chain to serve HTTPS with (needs --tls-key); default FINOPS_TLS_CERT_FILE."),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(help="Unencrypted PEM private key of --tls-cert; default FINOPS_TLS_KEY_FILE."),
    ] = None,
) -> None:
    """Run the service: ingest API, /healthz, /metrics and (by default) the scheduled jobs.

    Collectors authenticate with per-node tokens (`nodes token create`) or the shared FINOPS_INGEST_TOKEN (which
    admits every node: logged as a warning at start); with neither, serve refuses to start unless
    --insecure-no-token, or FINOPS_TELEMETRY_SOURCE=tsdb (readings go to the TSDB: ingest answers 401 to a batch
    without an ingest credential, 409 to one with). The REST API, /metrics and /docs take API tokens (`api-token
    create`) or FINOPS_API_TOKEN (an admin), never an ingest credential: serve refuses to start when
    FINOPS_API_TOKEN equals FINOPS_INGEST_TOKEN.

    With --tls-cert and --tls-key (or FINOPS_TLS_CERT_FILE and FINOPS_TLS_KEY_FILE) it speaks HTTPS only. Without
    them on an address other than loopback it warns that tokens travel in clear text.

    With --workers N (N > 1), N processes answer on the port, started and stopped by this one; the scheduled jobs
    then run elsewhere (`gpu-finops scheduler`), and each process applies FINOPS_INGEST_READINGS_PER_SECOND and
    its burst on its own, so a node may get up to N times the rate."""
    if workers > 1 and scheduler:
        raise FinopsError("--workers above 1 needs --no-scheduler: run the scheduled jobs in `gpu-finops scheduler`")
    if workers > 1 and insecure_no_token:
        raise FinopsError("--workers above 1 needs a credential: it does not combine with --insecure-no-token")
    settings = load_settings()
    tls = tls_files(settings, tls_cert, tls_key)
    if tls is None and not is_loopback(host):
        log.warning(PLAIN_HTTP_WARNING, host)
    cert_file, key_file = tls or (None, None)
    sessions = request_sessions(settings)
    token, api_token = _secrets(settings)
    if token is not None and token == api_token:
        raise FinopsError(
            "FINOPS_API_TOKEN equals FINOPS_INGEST_TOKEN: an ingest credential must not open the REST API; "
            "give the API its own token (or make role tokens with `gpu-finops api-token create`)"
        )
    readings_in_tsdb = settings.telemetry_source == "tsdb"
    with sessions() as session:
        now = utc_now()
        node_tokens, api_tokens = any_live_token(session, now), api_token_exists(session, now)
    if token is None and not node_tokens and not insecure_no_token and not readings_in_tsdb:
        raise FinopsError(
            "no ingest token: make per-node tokens with `gpu-finops nodes token create NODE`, or set "
            "FINOPS_INGEST_TOKEN or FINOPS_INGEST_TOKEN_FILE (or pass --insecure-no-token)"
        )
    insecure = insecure_no_token and token is None and not node_tokens and api_token is None and not api_tokens
    if insecure_no_token and not insecure:
        log.warning("--insecure-no-token ignored: tokens exist, every request requires one")
    if token is not None and not readings_in_tsdb:
        log.warning(SHARED_TOKEN_WARNING)
    if api_token is None and not api_tokens and not insecure:
        log.warning(
            "no API token (`gpu-finops api-token create`, or FINOPS_API_TOKEN): the REST API, /metrics and /docs "
            "refuse every request until one is made"
        )
    listen: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "warning",
        "ssl_certfile": cert_file,
        "ssl_keyfile": key_file,
    }
    if workers > 1:
        _serve_workers(workers, listen)
        return
    metrics = ServiceMetrics()
    pricing = load_pricing(settings)
    jobs = ScheduledJobs(settings, pricing, metrics.registry) if scheduler else None
    try:
        app = create_app(
            sessions,
            token,
            metrics,
            api_token,
            pricing.catalog,
            limits=ingest_limits(settings),
            insecure_no_token=insecure,
            readings_in_tsdb=readings_in_tsdb,
            reasons=settings.reason_policy,
            efficiency=settings.efficiency_policy,
        )
        settle_heap()
        serve_http(app, None if jobs is None else jobs.stopping, None if jobs is None else jobs.start, **listen)
    finally:
        if jobs is not None:
            jobs.stop()


@app.command()
def scheduler(
    metrics_port: Annotated[int, typer.Option(help="Port of this process's /metrics (budget gauges).")] = 8081,
    metrics_address: Annotated[str, typer.Option(help="Address /metrics listens on.")] = "127.0.0.1",
) -> None:
    """Run only the scheduled jobs (ledger rollup, idle detection, budget gauges), apart from `serve --no-scheduler`.

    Its /metrics holds every team's budget figures: it takes a viewer or admin API token, as the service's does."""
    settings = load_settings()
    registry = CollectorRegistry()
    sessions = request_sessions(settings)
    pricing = load_pricing(settings)
    api_token = settings.api_token.get_secret_value() if settings.api_token else None
    jobs = ScheduledJobs(settings, pricing, registry)
    try:
        serve_http(
            create_metrics_app(registry, ApiAuth(sessions, api_token)),
            jobs.stopping,
            jobs.start,
            host=metrics_address,
            port=metrics_port,
            log_level="warning",
        )
    finally:
        jobs.stop()


@app.command()
def dashboard(
    port: Annotated[int, typer.Option(help="TCP port of the Streamlit server.")] = 8501,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    insecure_no_login: Annotated[
        bool,
        typer.Option(help="Listen on a non-loopback --host without a log-in (everyone who reaches it sees all teams)."),
    ] = False,
) -> None:
    """Serve the Streamlit dashboard on the configured database.

    With FINOPS_DASHBOARD_OIDC_METADATA_URL set, people log in with that OpenID Connect provider and their groups
    give their role (docs/dashboard.md); without it there is no log-in, and the dashboard listens on a loopback
    address only, unless --insecure-no-login."""
    require_dashboard_extra("dashboard")
    settings = load_settings()
    check_listen_address(host, settings, insecure_no_login)
    open_engine(settings)
    serve_dashboard(host, port, settings=settings)
