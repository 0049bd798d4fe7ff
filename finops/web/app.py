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
Collectors do not retry a 422. A new GPU at an index of ``IngestLimits.max_gpus_per_node`` or above is refused by itself
(``{"uuid": u, "field": "gpus", …}``), the batch's other GPUs stored. A node token's request while
:data:`~finops.ingest.limits.REQUESTS_PER_NODE` of its node are under way is answered ``429`` at once, with
``Retry-After`` and ``Connection: close`` (``reason="requests"``).

No body is read before its credential is checked from the headers: ingest authenticates first, and every other request
with a body needs an admin credential (:class:`finops.web.auth.AdminBodies`: ``401``/``403`` otherwise, the body
unread). Bodies being read and handled share one budget per process (:class:`finops.web.body_limits.BodyBudget`,
``IngestLimits.body_memory_budget_bytes``): past it ``503`` with ``Retry-After``. A body over ``MAX_BODY_BYTES``, sent
or once decompressed, is refused with ``413`` and nothing stored; the body of any other request, over
``REST_MAX_BODY_BYTES``, too. Every body is read under a deadline (:class:`finops.web.body_limits.BodyDeadline`,
``IngestLimits.body_timeout_seconds``): a sender too slow gets ``408`` and its connection closed. A request that finds
the database busy (a lock another transaction holds; on PostgreSQL, once ``serve``'s lock timeout runs out:
``FINOPS_REQUEST_LOCK_TIMEOUT_SECONDS``) or out of reach (PostgreSQL down or restarting) is answered ``503`` with
``Retry-After``. A request FastAPI refuses in validation gets ``422`` naming each field and why, without the value sent
(:func:`validation_errors`). Decompression, validation and storage run in a worker thread (``INGEST_CONCURRENCY`` at
once), one database transaction per batch; a transaction PostgreSQL aborts to break a deadlock is run again (up to
:data:`finops.web.ingest_batch.DEADLOCK_ATTEMPTS` tries).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack, ExitStack
from functools import partial
from typing import Annotated, Any

import anyio
import psycopg
from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import Scope

from finops.analysis.waste import ReasonPolicy
from finops.ingest.group_commit import GroupCommit
from finops.ingest.limits import (
    LARGE_REQUESTS_PER_NODE,
    REQUESTS_PER_NODE,
    IngestLimits,
    NodeSlots,
    ReadingBuckets,
    TimeWindow,
)
from finops.ingest.readings import Ingestor
from finops.ingest.untimely import record_untimely
from finops.pricing.catalog import PriceCatalog
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.timeutil import from_epoch
from finops.web.alerts import create_alerts_router
from finops.web.auth import AdminBodies, ApiAuth, IngestAuth
from finops.web.body_limits import BodyBudget, BodyDeadline, BodyLimit, too_large
from finops.web.conformance import ERROR_RESPONSES, INGEST_OPENAPI, INGEST_RESPONSES, allow_every_method
from finops.web.deps import no_nul_parameters
from finops.web.ingest_batch import MAX_BODY_BYTES, Gate, ingest_batch, store_together
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
REFUSAL_REASONS = ("rate", "burst", "gpus", "requests")
"""``reason`` of ``gpufinops_ingest_refused_total``: the per-node limit a batch was refused by."""


MAX_ERROR_TEXT = 1024
"""Longest ``msg`` (and ``loc`` member) of a 422's validation error, in characters: a message that quotes a long
refused value is cut there, with how much was left out."""


def _cut(text: str) -> str:
    """``text``, cut to :data:`MAX_ERROR_TEXT` characters saying how many more there were."""
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"{text[:MAX_ERROR_TEXT]}… ({len(text) - MAX_ERROR_TEXT} characters more)"


def validation_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """FastAPI's validation errors (pydantic's shape) as a 422's ``detail``: per error ``type``, ``loc`` (where: e.g.
    ``["body", "team"]``) and ``msg`` (why), never ``input`` (the refused value, up to the whole body:
    :data:`REST_MAX_BODY_BYTES`) nor ``ctx``/``url``; text longer than :data:`MAX_ERROR_TEXT` is cut (:func:`_cut`)."""
    return [
        {
            "type": str(error.get("type", "")),
            "loc": [item if isinstance(item, int) else _cut(str(item)) for item in error.get("loc", ())],
            "msg": _cut(str(error.get("msg", ""))),
        }
        for error in errors
    ]


def _busy(exc: OperationalError) -> bool:
    """Whether ``exc`` is the database busy rather than broken: SQLite's "database is locked" (its busy timeout ran
    out while another connection held the write lock), PostgreSQL's ``lock_not_available`` (a lock wait that
    timed out) or ``deadlock_detected`` (once ingest's retries are spent)."""
    cause = exc.orig
    if isinstance(cause, psycopg.errors.LockNotAvailable | psycopg.errors.DeadlockDetected):
        return True
    return isinstance(cause, sqlite3.OperationalError) and "locked" in str(cause)


def _unreachable(exc: OperationalError) -> bool:
    """Whether ``exc`` is PostgreSQL out of reach: down, starting or shutting down, refusing connections, or the
    connection lost during the request (any other ``psycopg.OperationalError``). The pool checks a connection before
    lending it (``pool_pre_ping``, :func:`finops.db.engine.make_engine`), so the next request reconnects."""
    return isinstance(exc.orig, psycopg.OperationalError) or exc.connection_invalidated


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
            "burst (more readings than the burst, 422), gpus (more GPUs than a batch may carry, 422), requests (more "
            "requests under way than a node token may have at once, 429).",
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
    efficiency: EfficiencyPolicy | None = None,
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
    ``reasons``: the waste reasons' thresholds the REST API judges jobs with (default: the defaults);
    ``efficiency``: the efficiency bands' and bottleneck rules' (default: the defaults).
    """
    limits = limits or IngestLimits()
    # The OpenAPI pages are served below, behind authentication.
    app = FastAPI(
        title="gpu-finops", version="0.1.0", docs_url=None, redoc_url=None, openapi_url=None,
        dependencies=[Depends(no_nul_parameters)],
    )  # fmt: skip
    budget = BodyBudget(limits.body_memory_budget_bytes)
    app.state.body_budget = budget
    exempt = frozenset({INGEST_PATH})
    app.add_middleware(BodyLimit, limit=REST_MAX_BODY_BYTES, exempt=exempt, budget=budget)
    ingest_auth = IngestAuth(sessions, token, insecure_no_token)
    api_auth = ApiAuth(sessions, api_token, insecure_no_token)
    # Outside BodyLimit: a body is read only once its credential is known to be an admin's.
    app.add_middleware(AdminBodies, auth=api_auth, exempt=exempt)
    app.include_router(create_router(sessions, api_auth, catalog, reasons, efficiency), responses=ERROR_RESPONSES)
    app.include_router(create_alerts_router(sessions, api_auth), responses=ERROR_RESPONSES)
    allow_every_method(app)
    store = partial(store_together, sessions, Ingestor(), max_gpus_per_node=limits.max_gpus_per_node)
    commits = GroupCommit(store, INGEST_CONCURRENCY)
    buckets = ReadingBuckets(limits.readings_per_second, limits.readings_burst, clock)
    ingest_slots = anyio.CapacityLimiter(INGEST_CONCURRENCY)
    large_slots = anyio.CapacityLimiter(LARGE_INGEST_CONCURRENCY)
    node_slots, large_node_slots = NodeSlots(REQUESTS_PER_NODE), NodeSlots(LARGE_REQUESTS_PER_NODE)
    app.state.large_ingest_slots = large_slots
    metrics = metrics or ServiceMetrics()
    app.state.metrics = metrics

    def untimely(node: str, counts: dict[str, int], error: str) -> None:
        record_untimely(sessions, node, counts, error, from_epoch(int(clock())))

    def timed_out(scope: Scope) -> None:
        if scope["path"] == INGEST_PATH:
            metrics.requests.labels(code="408").inc()

    # Added last, so outermost: it bounds the reads of BodyLimit and of the routes alike.
    app.add_middleware(BodyDeadline, seconds=limits.body_timeout_seconds, on_timeout=timed_out)

    def reply(code: int, body: dict[str, Any]) -> JSONResponse:
        metrics.requests.labels(code=str(code)).inc()
        return JSONResponse(body, status_code=code)

    def too_many(node: str | None, most: int, kind: str) -> JSONResponse:
        """429 with ``Retry-After`` to a node token's request beyond the node's slots (:class:`NodeSlots`)."""
        metrics.refused.labels(reason="requests").inc()
        metrics.requests.labels(code="429").inc()
        detail = (
            f"node {node!r} has {most} ingest requests{kind} under way, the most a node may have at once (a "
            f"collector sends one at a time); nothing stored, retry in {RETRY_AFTER_SECONDS} s"
        )
        # The body is left unread: close the connection rather than read on what a slow sender trickles.
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"}
        return JSONResponse({"detail": detail}, status_code=429, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming each refused field and why (:func:`validation_errors`), without echoing what was sent."""
        return JSONResponse({"detail": validation_errors(exc.errors())}, status_code=422)

    @app.exception_handler(OperationalError)
    async def database_busy(request: Request, exc: OperationalError) -> JSONResponse:
        """503 with ``Retry-After`` (:data:`RETRY_AFTER_SECONDS`) when the database is busy (:func:`_busy`) or out of
        reach (:func:`_unreachable`), logged; any other OperationalError goes on to be a 500."""
        busy = _busy(exc)
        if not busy and not _unreachable(exc):
            raise exc
        state = "busy (a lock held by another transaction)" if busy else "unavailable (down, restarting or unreachable)"
        log.warning("database %s, %s %s answered 503: %s", state, request.method, request.url.path, exc.orig)
        if request.url.path == INGEST_PATH:
            metrics.requests.labels(code="503").inc()
        return JSONResponse(
            {"detail": f"the database is {state}; try again later"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    @app.post(INGEST_PATH, openapi_extra=INGEST_OPENAPI, responses=INGEST_RESPONSES)
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
        over_limit = too_large(MAX_BODY_BYTES)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return reply(413, over_limit)
        node = None if holder is None else holder.node
        with ExitStack() as node_held:
            if not node_held.enter_context(node_slots.take(node)):
                return too_many(node, REQUESTS_PER_NODE, "")
            async with ingest_slots, AsyncExitStack() as held:
                reservation = held.enter_context(budget.held())
                if declared.isdigit() and not reservation.cover(int(declared)):
                    metrics.requests.labels(code="503").inc()
                    return budget.refused()
                body = bytearray()
                large = False
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        return reply(413, over_limit)
                    if not reservation.cover(len(body)):
                        metrics.requests.labels(code="503").inc()
                        return budget.refused()
                    if not large and len(body) > SMALL_BODY_BYTES:
                        large = True
                        if not held.enter_context(large_node_slots.take(node)):
                            large_bodies = f" with a body over {SMALL_BODY_BYTES} bytes"
                            return too_many(node, LARGE_REQUESTS_PER_NODE, large_bodies)
                        await held.enter_async_context(large_slots)
                window = TimeWindow.at(clock(), limits.retention_days, limits.future_grace_seconds)
                gate = Gate(buckets, limits.max_gpus_per_batch)
                payload, body = bytes(body), bytearray()
                code, answer = await anyio.to_thread.run_sync(
                    ingest_batch, commits, payload, content_encoding == "gzip", window, holder, gate, untimely
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

    @app.get(
        "/metrics",
        dependencies=[Depends(auth.fleet_reader)],
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}},
                   **{code: ERROR_RESPONSES[code] for code in (401, 403, 503)}},
    )  # fmt: skip
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
