"""The service's HTTP API (FastAPI): ingest, health and Prometheus metrics.

``/healthz`` is open; ``/metrics`` needs a viewer or admin credential and ``/docs``/``/openapi.json`` any API
credential (:class:`finops.web.auth.ApiAuth`): in Prometheus, the scrape job's ``authorization`` option.

Ingest is authenticated by :class:`finops.web.auth.IngestAuth`: a batch posted with a node token whose ``node`` is
not the token's is refused with ``403`` naming both, and nothing of it is stored.

Ingest policy for a batch with malformed readings: the valid readings are stored and the response is ``422``
with ``{"accepted": n, "rejected": [...]}`` naming each rejected reading:

- a row: ``{"index": i, "field": "samples[i].name", "error": "…"}``;
- a value in a series: ``{"series": s, "index": k, "field": "series[s].name[k]", "error": "…"}`` (reading k of
  series s is left out);
- a whole series (bad ``uuid``, columns of unequal length, …): ``{"series": s, "field": "series[s].uuid",
  "error": "…", "readings": n}`` (its n readings are left out);
- every reading of a GPU that the batch's ``gpus`` does not describe and the service does not know (so it
  cannot be placed on a node): ``{"uuid": u, "field": "gpus", "error": "…", "readings": n}`` (its
  ``job_utilization`` entries are left out too);
- a ``job_utilization`` entry (per-job utilisation of a shared GPU, :class:`collector.contract.wire.JobUtilization`):
  ``{"job_utilization": j, "field": "job_utilization[j].name", "error": "…", "readings": 0}`` (entry j is left
  out; the readings are stored: it is not one of them), or ``{"field": "job_utilization", "error": "…",
  "readings": 0}`` when the field is not a list (every entry left out);
- a ``node_io`` entry (the node's fabric and storage rates of one cycle, :class:`collector.contract.wire.NodeIo`):
  likewise ``{"node_io": j, "field": "node_io[j].name", "error": "…", "readings": 0}``, or ``{"field": "node_io",
  …}`` for a field that is not a list.

A batch-level error (``node``, ``gpus``, not JSON) stores nothing. So does a batch naming more GPUs than
``IngestLimits.max_gpus_per_batch`` or holding more readings than the node's burst (``422``, it can never pass), and
one its node's token bucket cannot take now (:class:`finops.ingest.limits.ReadingBuckets`: ``429`` with
``Retry-After``, the whole seconds until it can); each counted in ``gpufinops_ingest_refused_total{reason}``.
Collectors do not retry a 422. A body over
``MAX_BODY_BYTES``, sent or once decompressed, is refused with ``413`` and nothing stored; the body of any other
request, over ``REST_MAX_BODY_BYTES``, too. Every body is read under a deadline (:class:`_BodyDeadline`,
``IngestLimits.body_timeout_seconds``): a sender too slow gets ``408`` and its connection closed. A request that
finds the database busy (a lock another transaction holds) is answered ``503`` with ``Retry-After``.
Decompression, validation and storage run in a worker thread (``INGEST_CONCURRENCY`` at once), one database
transaction per batch; a transaction PostgreSQL aborts to break a deadlock is run again (up to
``DEADLOCK_ATTEMPTS`` tries).
"""

from __future__ import annotations

import gzip
import io
import logging
import sqlite3
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import Annotated, Any

import anyio
import psycopg
import pydantic_core
from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from collector.contract.wire import READING_COLUMNS, SIDE_PARTS, IngestBatch
from finops.analysis.waste import ReasonPolicy
from finops.ingest.group_commit import GroupCommit
from finops.ingest.limits import IngestLimits, ReadingBuckets, TimeWindow
from finops.ingest.node_tokens import TokenHolder
from finops.ingest.readings import Ingestor
from finops.pricing.catalog import PriceCatalog
from finops.web.alerts import create_alerts_router
from finops.web.auth import ApiAuth, IngestAuth
from finops.web.rest import create_router

log = logging.getLogger(__name__)

INGEST_CONCURRENCY = 16
"""Ingest requests handled at once per process; more wait their turn. Those being stored at the same moment share
one transaction (:class:`finops.ingest.group_commit.GroupCommit`), so ingest holds one pooled connection at a
time, and the more there are, the fewer transactions: a collector's single-cycle POSTs arrive by the hundred per
second."""
LARGE_INGEST_CONCURRENCY = 4
"""Of :data:`INGEST_CONCURRENCY`, how many may hold a body larger than :data:`SMALL_BODY_BYTES` as sent (the
backlog of a collector that was cut off): bounds ingest's memory to about this many bodies of
:data:`MAX_BODY_BYTES` and their parsed readings."""
SMALL_BODY_BYTES = 256 * 2**10
"""Largest body, as sent, that needs no slot of :data:`LARGE_INGEST_CONCURRENCY` (one collection cycle of a node
is about 1 KiB gzipped)."""
DEADLOCK_ATTEMPTS = 3
"""Tries of an ingest transaction that PostgreSQL aborts to break a deadlock (it is then run again whole)."""
MAX_BODY_BYTES = 16 * 2**20
"""Largest ingest body, as sent and once decompressed (a collector posts at most 10,000 readings at a time,
:class:`collector.delivery.Delivery`: about 1.5 MB of JSON); a larger one is answered 413 without being read or
decompressed further. Bodies are read only within one of the ``INGEST_CONCURRENCY`` slots, so at most that many
are held at once."""
REST_MAX_BODY_BYTES = 4 * 2**20
"""Largest body of any request but ingest: the price catalog YAML of ``PUT /api/v1/prices``, the largest, is about
20 KB (``finops/pricing/price_catalog.yaml``), the JSON bodies a few hundred bytes. A larger one is answered 413
before the route runs."""
RETRY_AFTER_SECONDS = 5
"""``Retry-After`` of the 503 answered when the database is busy (a write lock held by a rollup, a lock wait
that timed out): long enough for a rollup's transaction to end, short against a collector's cycle."""
INGEST_PATH = "/api/v1/ingest"
READINGS_IN_TSDB = (
    "the telemetry source is a TSDB (FINOPS_TELEMETRY_SOURCE=tsdb): send readings to the TSDB (dcgm-exporter scraped "
    "by it, or remote-write), not to this service"
)
"""The 409's ``detail`` of ingest when the service reads telemetry from a TSDB."""
REFUSAL_REASONS = ("rate", "burst", "gpus")
"""``reason`` of ``gpufinops_ingest_refused_total``: the per-node limit a batch was refused by."""


def _too_large(limit: int, when: str = "") -> dict[str, str]:
    """The 413 answer's body for a request body over ``limit`` bytes (``when``: e.g. " once decompressed")."""
    return {"detail": f"body larger than {limit} bytes{when}"}


class _BodyLimit:
    """ASGI middleware bounding request bodies: a body over ``limit`` bytes, declared (``Content-Length``) or as
    read, is answered 413 (:func:`_too_large`) before the route runs, holding at most ``limit`` bytes; a body within
    it is read whole and handed on. Requests to ``exempt`` paths pass untouched (ingest bounds its own body)."""

    def __init__(self, app: ASGIApp, limit: int, exempt: frozenset[str]) -> None:
        self.app, self.limit, self.exempt = app, limit, exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        refused = JSONResponse(_too_large(self.limit), status_code=413)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await refused(scope, receive, send)
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                await refused(scope, receive, send)
                return
            more = message.get("more_body", False)
        whole: Message | None = {"type": "http.request", "body": bytes(body), "more_body": False}

        async def replay() -> Message:
            nonlocal whole
            if whole is None:
                return await receive()
            message, whole = whole, None
            return message

        await self.app(scope, replay, send)


class _BodyTimeout(Exception):
    """A request body not read whole within its deadline."""


class _BodyDeadline:
    """ASGI middleware reading every request body under one overall deadline of ``seconds``, counted from the
    application's first read of it (an ingest request waiting for its slot is not the sender's delay): when the
    body is not all in by then the request is answered ``408`` with ``Connection: close``, so the server drops the
    connection and whatever the sender has yet to send, and ``on_timeout(scope)`` is called. uvicorn bounds only the
    wait between requests on a kept-alive connection (``--timeout-keep-alive``), not a body sent one byte at a time.
    A response already started when the deadline passes (not expected: bodies are read before answering) ends the
    connection without one."""

    def __init__(self, app: ASGIApp, seconds: float, on_timeout: Callable[[Scope], None]) -> None:
        self.app, self.seconds, self.on_timeout = app, seconds, on_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline: float | None = None
        body_read = started = False

        async def bounded() -> Message:
            nonlocal deadline, body_read
            if body_read:  # the body is in: later reads wait for the client to go away, unbounded
                return await receive()
            now = anyio.current_time()
            deadline = now + self.seconds if deadline is None else deadline
            try:
                with anyio.fail_after(max(0.0, deadline - now)):
                    message = await receive()
            except TimeoutError:
                raise _BodyTimeout from None
            body_read = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded, tracked)
        except _BodyTimeout:
            log.warning(
                "%s %s: body not received within %g s; answered 408", scope["method"], scope["path"], self.seconds
            )
            self.on_timeout(scope)
            if started:
                raise
            detail = {"detail": f"request body not received within {self.seconds:g} s"}
            await JSONResponse(detail, status_code=408, headers={"Connection": "close"})(scope, receive, send)


def _busy(exc: OperationalError) -> bool:
    """Whether ``exc`` is the database busy rather than broken: SQLite's "database is locked" (its busy timeout ran
    out while another connection held the write lock), PostgreSQL's ``lock_not_available`` (a lock wait that
    timed out) or ``deadlock_detected`` (once ingest's retries are spent)."""
    cause = exc.orig
    if isinstance(cause, psycopg.errors.LockNotAvailable | psycopg.errors.DeadlockDetected):
        return True
    return isinstance(cause, sqlite3.OperationalError) and "locked" in str(cause)


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _batch_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rejections of a batch refused as a whole: ``{"field", "error"}`` per validation error."""
    return [{"field": _field_path(e["loc"]) or "batch", "error": e["msg"]} for e in errors]


class ServiceMetrics:
    """The service's own Prometheus series, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.samples = Counter("gpufinops_ingest_samples", "GPU readings stored by ingest.", registry=self.registry)
        self.rejected = Counter(
            "gpufinops_ingest_rejected_samples", "GPU readings rejected as malformed.", registry=self.registry
        )
        self.requests = Counter(
            "gpufinops_ingest_requests", "Ingest requests by HTTP status code.", ["code"], registry=self.registry
        )
        self.refused = Counter(
            "gpufinops_ingest_refused",
            "Ingest batches refused whole by a per-node limit: rate (over the node's readings per second, 429), "
            "burst (more readings than the burst, 422), gpus (more GPUs than a batch may carry, 422).",
            ["reason"],
            registry=self.registry,
        )
        for reason in REFUSAL_REASONS:
            self.refused.labels(reason=reason)


def create_app(
    sessions: sessionmaker[Session],
    token: str | None,
    metrics: ServiceMetrics | None = None,
    api_token: str | None = None,
    catalog: PriceCatalog | None = None,
    limits: IngestLimits | None = None,
    clock: Callable[[], float] = time.time,
    insecure_no_token: bool = False,
    readings_in_tsdb: bool = False,
    reasons: ReasonPolicy | None = None,
) -> FastAPI:
    """The FastAPI application: ingest, health, metrics and the REST API (:mod:`finops.web.rest`).

    Ingest takes node tokens (:class:`finops.web.auth.IngestAuth`) and ``token``, the shared token (None: none).
    The REST API, ``/metrics`` and the OpenAPI pages take API tokens and ``api_token``, the ``FINOPS_API_TOKEN``
    setting (an admin; None: none) (:class:`finops.web.auth.ApiAuth`); never an ingest credential.
    ``insecure_no_token`` turns authentication off for requests without a credential (one presented is still
    checked); ``serve`` passes it only when no credential of any kind exists.
    ``catalog`` is the configured price catalog (default: the packaged one), in force until one is imported.
    ``limits``: what ingest accepts beyond the format (:class:`IngestLimits`, default its defaults); ``clock``: the
    wall clock in epoch seconds that readings' times are judged against, and the nodes' token buckets run on.
    ``readings_in_tsdb`` (``FINOPS_TELEMETRY_SOURCE=tsdb``): ingest answers every authenticated batch 409
    (:data:`READINGS_IN_TSDB`), storing nothing: readings go to the TSDB, and GPUs are found there.
    ``reasons``: the waste reasons' thresholds the REST API judges jobs with (default: the defaults).
    """
    limits = limits or IngestLimits()
    # The OpenAPI pages are served below, behind authentication.
    app = FastAPI(title="gpu-finops", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_BodyLimit, limit=REST_MAX_BODY_BYTES, exempt=frozenset({INGEST_PATH}))
    ingest_auth = IngestAuth(sessions, token, insecure_no_token)
    api_auth = ApiAuth(sessions, api_token, insecure_no_token)
    app.include_router(create_router(sessions, api_auth, catalog, reasons))
    app.include_router(create_alerts_router(sessions, api_auth))
    commits = GroupCommit(partial(_store_together, sessions, Ingestor()), INGEST_CONCURRENCY)
    buckets = ReadingBuckets(limits.readings_per_second, limits.readings_burst, clock)
    ingest_slots = anyio.CapacityLimiter(INGEST_CONCURRENCY)
    large_slots = anyio.CapacityLimiter(LARGE_INGEST_CONCURRENCY)
    app.state.large_ingest_slots = large_slots
    metrics = metrics or ServiceMetrics()
    app.state.metrics = metrics

    def timed_out(scope: Scope) -> None:
        if scope["path"] == INGEST_PATH:
            metrics.requests.labels(code="408").inc()

    # Added last, so outermost: it bounds the reads of _BodyLimit and of the routes alike.
    app.add_middleware(_BodyDeadline, seconds=limits.body_timeout_seconds, on_timeout=timed_out)

    def reply(code: int, body: dict[str, Any]) -> JSONResponse:
        metrics.requests.labels(code=str(code)).inc()
        return JSONResponse(body, status_code=code)

    @app.exception_handler(OperationalError)
    async def database_busy(request: Request, exc: OperationalError) -> JSONResponse:
        """503 with ``Retry-After`` (:data:`RETRY_AFTER_SECONDS`) when the database is busy (:func:`_busy`), logged;
        any other OperationalError goes on to be a 500."""
        if not _busy(exc):
            raise exc
        log.warning("database busy, %s %s answered 503: %s", request.method, request.url.path, exc.orig)
        if request.url.path == INGEST_PATH:
            metrics.requests.labels(code="503").inc()
        return JSONResponse(
            {"detail": "the database is busy (a lock held by another transaction); try again later"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    @app.post(INGEST_PATH)
    async def ingest(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        content_encoding: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        """Store a batch of GPU readings (wire format in :mod:`collector.contract.wire`), gzip or plain JSON."""
        try:
            # The shared token needs no database read: no worker thread for it.
            shared = ingest_auth.shared_admits(authorization)
            holder = None if shared else await anyio.to_thread.run_sync(ingest_auth.holder, authorization)
        except HTTPException:
            metrics.requests.labels(code="401").inc()
            raise
        if readings_in_tsdb:
            return reply(409, {"detail": READINGS_IN_TSDB})
        too_large = _too_large(MAX_BODY_BYTES)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return reply(413, too_large)
        async with ingest_slots, AsyncExitStack() as held:
            body = bytearray()
            large = False
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    return reply(413, too_large)
                if not large and len(body) > SMALL_BODY_BYTES:
                    large = True
                    await held.enter_async_context(large_slots)
            window = TimeWindow.at(clock(), limits.retention_days, limits.future_grace_seconds)
            gate = _Gate(buckets, limits.max_gpus_per_batch)
            code, answer = await anyio.to_thread.run_sync(
                _ingest, commits, bytes(body), content_encoding == "gzip", window, holder, gate
            )
        if gate.refused is not None:
            metrics.refused.labels(reason=gate.refused).inc()
        if gate.retry_after:
            metrics.requests.labels(code=str(code)).inc()
            return JSONResponse(answer, status_code=code, headers={"Retry-After": str(gate.retry_after)})
        if "detail" not in answer:  # stored: count what was kept and what was left out
            metrics.samples.inc(answer["accepted"])
            metrics.rejected.inc(sum(r.get("readings", 1) for r in answer["rejected"]))
        return reply(code, answer)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """200 when the database answers."""
        with sessions() as session:
            session.execute(text("SELECT 1"))
        return {"status": "ok"}

    add_metrics_route(app, metrics.registry, api_auth)

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(api_auth.reader)])
    def openapi() -> JSONResponse:
        """The OpenAPI description of the API (any API credential)."""
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(api_auth.reader)])
    def docs() -> HTMLResponse:
        """Swagger UI over ``/openapi.json`` (any API credential; the browser must send it too, e.g. through a
        proxy that adds the header)."""
        return get_swagger_ui_html(openapi_url="/openapi.json", title="gpu-finops API")

    return app


def add_metrics_route(app: FastAPI, registry: CollectorRegistry, auth: ApiAuth) -> None:
    """``GET /metrics`` on ``app``: ``registry`` in the Prometheus text format, for a viewer or admin credential
    (:meth:`ApiAuth.fleet_reader`): with the scheduled jobs, it holds every team's budget figures."""

    @app.get("/metrics", dependencies=[Depends(auth.fleet_reader)])
    def prometheus_metrics() -> Response:
        """The process's metrics in the Prometheus text format."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def create_metrics_app(registry: CollectorRegistry, auth: ApiAuth) -> FastAPI:
    """An application answering only ``GET /metrics`` (:func:`add_metrics_route`) and ``/healthz`` (open): the
    ``gpu-finops scheduler`` process's."""
    app = FastAPI(title="gpu-finops scheduler", docs_url=None, redoc_url=None, openapi_url=None)
    add_metrics_route(app, registry, auth)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """200 while the process runs."""
        return {"status": "ok"}

    return app


class _Gate:
    """The per-node limits one batch goes through before it is stored (:meth:`admit`), and what they decided."""

    def __init__(self, buckets: ReadingBuckets, max_gpus: int) -> None:
        self.buckets, self.max_gpus = buckets, max_gpus
        self.refused: str | None = None
        """The ``gpufinops_ingest_refused_total`` reason the batch was refused for, if it was."""
        self.retry_after = 0
        """The 429's ``Retry-After`` seconds (0: not refused for its rate)."""
        self.taken = 0

    def admit(self, batch: IngestBatch) -> tuple[int, dict[str, Any]] | None:
        """None when ``batch`` may be stored (its readings taken from its node's bucket), else the answer refusing
        it whole: 422 for more GPUs than :attr:`max_gpus` or more readings than the burst (it can never pass), 429
        when the bucket does not hold its readings now."""
        uuids = batch.gpu_uuids
        readings = batch.reading_count
        if len(uuids) > self.max_gpus:
            self.refused = "gpus"
            error = (
                f"the batch names {len(uuids)} GPUs, more than the {self.max_gpus} a batch may carry "
                "(FINOPS_INGEST_MAX_GPUS_PER_BATCH); a batch is one node's GPUs"
            )
            return 422, _refused_whole("gpus", error, readings)
        if not self.buckets.fits(readings):
            self.refused = "burst"
            error = (
                f"the batch holds {readings} readings, more than a node may send at once ({self.buckets.burst}, "
                "FINOPS_INGEST_READINGS_BURST): it can never pass; send smaller batches"
            )
            return 422, _refused_whole("batch", error, readings)
        wait = self.buckets.take(batch.node, readings)
        if wait:
            self.refused, self.retry_after = "rate", wait
            detail = (
                f"node {batch.node!r} is over its ingest rate ({self.buckets.rate:g} readings/s, burst "
                f"{self.buckets.burst}; FINOPS_INGEST_READINGS_PER_SECOND, FINOPS_INGEST_READINGS_BURST): "
                f"{readings} readings refused, nothing stored; retry in {wait} s"
            )
            return 429, {"detail": detail}
        self.taken = readings
        return None

    def give_back(self, node: str) -> None:
        """Return what :meth:`admit` took, the batch not having been stored."""
        if self.taken:
            self.buckets.give_back(node, self.taken)
            self.taken = 0


def _refused_whole(field: str, error: str, readings: int) -> dict[str, Any]:
    """The 422 answer's body for a batch refused whole by a limit, its readings counted (as collectors count them)."""
    rejected = [{"field": field, "error": error, "readings": readings}]
    return {"accepted": 0, "rejected": rejected, "detail": "batch rejected"}


def _ingest(
    commits: GroupCommit[IngestBatch, _Stored],
    body: bytes,
    gzipped: bool,
    window: TimeWindow,
    holder: TokenHolder | None = None,
    gate: _Gate | None = None,
) -> tuple[int, dict[str, Any]]:
    """Decompress, validate and store one request body (in a transaction shared with the requests being stored at
    the same moment: ``commits``); returns the HTTP status and the answer's JSON. ``window``:
    the times a reading may have (others are refused one by one); ``holder``: the node token it came with (None: a
    token of every node), whose node the batch must be from; ``gate``: the per-node limits (None: none)."""
    if gzipped:
        try:
            body = _gunzip(body)
        except (OSError, EOFError, zlib.error) as exc:
            return 400, {"detail": f"body is not valid gzip: {exc}"}
        except _TooLarge:
            return 413, _too_large(MAX_BODY_BYTES, " once decompressed")
    batch, rejected, origins = _validate(body)
    if batch is None:
        return (422 if rejected else 400), {"accepted": 0, "rejected": rejected, "detail": "batch rejected"}
    if holder is not None and batch.node != holder.node:
        return 403, {"detail": f"node token {holder.token_id} is for node {holder.node!r}, not {batch.node!r}"}
    if gate is not None and (refusal := gate.admit(batch)) is not None:
        return refusal
    try:
        return _store(commits, batch, origins, window, rejected)
    except BaseException:
        if gate is not None:
            gate.give_back(batch.node)
        raise


_Stored = tuple[int, dict[str, str], set[str]]
"""What storing a batch gave: (readings stored, UUIDs refused with the reason, UUIDs unknown)."""


def _store(
    commits: GroupCommit[IngestBatch, _Stored],
    batch: IngestBatch,
    origins: _Origins,
    window: TimeWindow,
    rejected: list[dict[str, Any]],
) -> tuple[int, dict[str, Any]]:
    """Store a validated batch's readings within ``window``; returns the HTTP status and the answer's JSON."""
    batch, untimely = _outside_window(batch, origins, window)
    rejected += untimely
    accepted, refused, unknown = commits.submit(batch)
    if unknown or refused:
        unknown_error = "readings of GPU {}, which the batch's gpus do not describe and the service does not know"
        reasons = {uuid: unknown_error.format(uuid) for uuid in unknown} | refused
        rejected = rejected + _gpu_errors(batch, reasons)
    return (422 if rejected else 200), {"accepted": accepted, "rejected": rejected}


def _store_together(
    sessions: sessionmaker[Session], ingestor: Ingestor, batches: Sequence[IngestBatch]
) -> list[_Stored]:
    """Store ``batches`` in one transaction, each without its GPUs that :meth:`Ingestor.conflicts` refuses or does
    not know; run again whole (up to :data:`DEADLOCK_ATTEMPTS` times) when PostgreSQL chooses it as a deadlock
    victim. What :class:`GroupCommit` runs for the batches of concurrent requests."""
    attempt = 1
    while True:
        try:
            with sessions.begin() as session:
                found = ingestor.conflicts(session, batches)
                kept = [
                    _without_gpus(batch, unknown | set(refused)) if unknown or refused else batch
                    for batch, (refused, unknown) in zip(batches, found, strict=True)
                ]
                stored = ingestor.store_all(session, kept)
            return [(count, refused, unknown) for count, (refused, unknown) in zip(stored, found, strict=True)]
        except (OperationalError, psycopg.errors.DeadlockDetected) as exc:
            deadlock = isinstance(getattr(exc, "orig", exc), psycopg.errors.DeadlockDetected)
            if not deadlock or attempt == DEADLOCK_ATTEMPTS:
                raise
            log.info("ingest transaction chosen as a deadlock victim (attempt %d); running it again", attempt)
            attempt += 1


class _TooLarge(Exception):
    """A body over :data:`MAX_BODY_BYTES` once decompressed."""


def _gunzip(body: bytes) -> bytes:
    """``body`` gunzipped (one or more gzip members, RFC 1952; trailing zero padding allowed, as by
    :func:`gzip.decompress`), in time linear in its size; raises :class:`_TooLarge` once the output passes
    :data:`MAX_BODY_BYTES` (nothing more is inflated), and ``OSError``/``EOFError`` for a corrupt or truncated
    stream."""
    with gzip.GzipFile(fileobj=io.BytesIO(body)) as stream:
        out = stream.read(MAX_BODY_BYTES + 1)
    if len(out) > MAX_BODY_BYTES:
        raise _TooLarge
    return out


def _without_gpus(batch: IngestBatch, uuids: set[str]) -> IngestBatch:
    """``batch`` without the ``gpus`` entries, readings and ``job_utilization`` entries of ``uuids``."""
    return batch.model_copy(
        update={
            "gpus": [g for g in batch.gpus if g.uuid not in uuids],
            "series": [s for s in batch.series if s.uuid not in uuids],
            "samples": [r for r in batch.samples if r.uuid not in uuids],
            "job_utilization": [j for j in batch.job_utilization if j.uuid not in uuids],
        }
    )


def _gpu_errors(batch: IngestBatch, reasons: dict[str, str]) -> list[dict[str, Any]]:
    """One rejection per GPU of ``reasons`` (UUID -> why its readings were left out), with their number."""
    readings = dict.fromkeys(reasons, 0)
    for series in batch.series:
        if series.uuid in reasons:
            readings[series.uuid] += len(series.ts)
    for reading in batch.samples:
        if reading.uuid in reasons:
            readings[reading.uuid] += 1
    return [
        {"uuid": uuid, "field": "gpus", "error": reasons[uuid], "readings": count}
        for uuid, count in sorted(readings.items())
    ]


_SERIES_VALUES = frozenset({"ts", *READING_COLUMNS})


def _series_length(item: object) -> int:
    ts = item.get("ts") if isinstance(item, dict) else None
    return len(ts) if isinstance(ts, list) else 0


class _Origins:
    """Where the entries of a batch left after validation refused some stood in the body, so that later refusals
    name them by their place as sent. ``None`` lists: nothing was left out."""

    def __init__(
        self,
        rows: list[int] | None = None,
        series: list[int] | None = None,
        values: dict[int, set[int]] | None = None,
        sides: dict[str, list[int]] | None = None,
    ) -> None:
        self.rows, self.series, self.values, self.sides = rows, series, values or {}, sides or {}

    def row(self, index: int) -> int:
        return index if self.rows is None else self.rows[index]

    def side(self, part: str, index: int) -> int:
        """The place as sent of the ``index``-th entry left in side part ``part`` (one of :data:`SIDE_PARTS`)."""
        kept = self.sides.get(part)
        return index if kept is None else kept[index]

    def series_of(self, index: int) -> int:
        return index if self.series is None else self.series[index]

    def value(self, series: int, index: int) -> int:
        """The place in series ``series`` (as sent) of the ``index``-th value left in it."""
        gone = self.values.get(series)
        if not gone:
            return index
        return [k for k in range(index + len(gone) + 1) if k not in gone][index]


_AS_SENT = _Origins()


def _outside_window(
    batch: IngestBatch, origins: _Origins, window: TimeWindow
) -> tuple[IngestBatch, list[dict[str, Any]]]:
    """``batch`` without its readings and side entries (:data:`SIDE_PARTS`) stamped outside ``window``, and their
    rejections, named by their place as sent (``series[s].ts[k]``, ``samples[i].ts``, ``job_utilization[j].ts``,
    ``node_io[j].ts``)."""
    rejected: list[dict[str, Any]] = []
    update: dict[str, Any] = {}
    series = batch.series
    if any(s.ts and not (window.holds(min(s.ts)) and window.holds(max(s.ts))) for s in series):
        kept_series = []
        for position, item in enumerate(series):
            bad = [k for k, ts in enumerate(item.ts) if not window.holds(ts)]
            if not bad:
                kept_series.append(item)
                continue
            sent = origins.series_of(position)
            for k in bad:
                place, error = origins.value(sent, k), window.reason(item.ts[k])
                field = f"series[{sent}].ts[{place}]"
                rejected.append({"series": sent, "index": place, "field": field, "error": error})
            gone = set(bad)
            columns = {
                name: [v for k, v in enumerate(getattr(item, name)) if k not in gone]
                for name in ("ts", *READING_COLUMNS)
                if getattr(item, name) is not None
            }
            kept_series.append(item.model_copy(update=columns))
        update["series"] = kept_series
    epochs = [int(r.ts.timestamp()) for r in batch.samples]
    if not all(map(window.holds, epochs)):
        update["samples"] = [r for r, ts in zip(batch.samples, epochs, strict=True) if window.holds(ts)]
        for position, ts in enumerate(epochs):
            if not window.holds(ts):
                sent = origins.row(position)
                rejected.append({"index": sent, "field": f"samples[{sent}].ts", "error": window.reason(ts)})
    for part in SIDE_PARTS:
        entries = getattr(batch, part)
        if all(window.holds(e.ts) for e in entries):
            continue
        update[part] = [e for e in entries if window.holds(e.ts)]
        for position, side_entry in enumerate(entries):
            if not window.holds(side_entry.ts):
                sent = origins.side(part, position)
                field, error = f"{part}[{sent}].ts", window.reason(side_entry.ts)
                rejected.append({part: sent, "field": field, "error": error, "readings": 0})
    return (batch.model_copy(update=update) if update else batch), rejected


def _validate(body: bytes) -> tuple[IngestBatch | None, list[dict[str, Any]], _Origins]:
    """The batch with its valid readings, the rejected ones, and where what is left stood in the body; (None,
    errors, …) if the batch itself is bad."""
    try:
        return IngestBatch.model_validate_json(body), [], _AS_SENT
    except ValidationError as exc:
        errors = exc.errors()
    rejected: list[dict[str, Any]] = []
    bad_rows: set[int] = set()
    bad_values: dict[int, set[int]] = {}
    bad_series: dict[int, dict[str, Any]] = {}
    bad_sides: dict[str, set[int]] = {part: set() for part in SIDE_PARTS}
    every_side_bad: set[str] = set()
    for error in errors:
        loc, entry = error["loc"], {"field": _field_path(error["loc"]), "error": error["msg"]}
        if loc and loc[0] in bad_sides:  # not a reading: reject the entry, keep the readings
            part = str(loc[0])
            if len(loc) >= 2 and isinstance(loc[1], int):
                rejected.append({part: loc[1], **entry, "readings": 0})
                bad_sides[part].add(loc[1])
            else:
                rejected.append({**entry, "readings": 0})
                every_side_bad.add(part)
        elif len(loc) >= 2 and loc[0] == "samples" and isinstance(loc[1], int):
            rejected.append({"index": loc[1], **entry})
            bad_rows.add(loc[1])
        elif len(loc) == 4 and loc[0] == "series" and isinstance(loc[1], int) and loc[2] in _SERIES_VALUES \
                and isinstance(loc[3], int):  # fmt: skip
            rejected.append({"series": loc[1], "index": loc[3], **entry})
            bad_values.setdefault(loc[1], set()).add(loc[3])
        elif len(loc) >= 2 and loc[0] == "series" and isinstance(loc[1], int):
            bad_series.setdefault(loc[1], {"series": loc[1], **entry})
        else:
            return None, _batch_errors(errors), _AS_SENT
    # Parsed as pydantic parsed it: Infinity/NaN literals and huge numbers (refused above, by field) load as floats,
    # large integers stay integers.
    data = pydantic_core.from_json(body, allow_inf_nan=True)
    series = data.get("series") or []
    for index, item in enumerate(series):
        # Unequal column lengths are judged only once every value passed: judge them here too.
        length = _series_length(item)
        for name in READING_COLUMNS:
            column = item.get(name) if isinstance(item, dict) else None
            if index not in bad_series and isinstance(column, list) and len(column) != length:
                message = f"Value error, {name} has {len(column)} values for {length} timestamps"
                bad_series[index] = {"series": index, "field": f"series[{index}]", "error": message}
    for index, entry in sorted(bad_series.items()):
        rejected.append({**entry, "readings": _series_length(series[index])})
    origins = _Origins(values=bad_values)
    if bad_rows:
        origins.rows = [i for i in range(len(data["samples"])) if i not in bad_rows]
        data["samples"] = [data["samples"][i] for i in origins.rows]
    for part, bad in bad_sides.items():
        if part in every_side_bad:
            del data[part]
        elif bad:
            origins.sides[part] = [i for i in range(len(data[part])) if i not in bad]
            data[part] = [data[part][i] for i in origins.sides[part]]
    if series:
        origins.series = [index for index in range(len(series)) if index not in bad_series]
        data["series"] = [_without(series[index], bad_values.get(index, set())) for index in origins.series]
    try:
        return IngestBatch.model_validate(data), rejected, origins
    except ValidationError as exc:  # not expected: whatever is left is refused as a whole
        return None, _batch_errors(exc.errors()), _AS_SENT


def _without(item: dict[str, Any], positions: set[int]) -> dict[str, Any]:
    """A series object without the readings at ``positions``."""
    if not positions:
        return item
    return {
        key: [v for k, v in enumerate(value) if k not in positions] if key in _SERIES_VALUES and isinstance(value, list)
        else value
        for key, value in item.items()
    }  # fmt: skip
