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
  …}`` for a field that is not a list;
- a ``gpus`` entry (a GPU's inventory, :class:`collector.contract.wire.GpuInfo`): ``{"uuid": u, "field":
  "gpus[g].model", "error": "…", "readings": n}``: entry g and the n readings of its GPU are left out (what the
  entry says decides how they are stored and split), the batch's other GPUs stored; an entry whose ``uuid`` cannot
  be read refuses the batch.

A batch-level error (``node``, ``gpus`` not a list, not JSON) stores nothing. So does a batch naming more GPUs than
``IngestLimits.max_gpus_per_batch`` or holding more rows than the node's burst (``422``, it can never pass), and one
its node's token bucket cannot take now (its rows: readings, ``job_utilization`` and ``node_io`` entries;
:class:`finops.web.ingest_batch.Gate`; :class:`finops.ingest.limits.ReadingBuckets`: ``429`` with
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
``REST_MAX_BODY_BYTES``, too. An ingest body's ``Content-Encoding`` is gzip or none (``identity``); any other is
answered ``415`` unread (:data:`finops.web.ingest_route.GZIP_CODINGS`). Every body is read under a deadline
(:class:`finops.web.body_limits.BodyDeadline`, ``IngestLimits.body_timeout_seconds``): a sender too slow gets ``408``
and its connection closed. A request that finds
the database busy (a lock another transaction holds; on PostgreSQL, once ``serve``'s lock timeout runs out:
``FINOPS_REQUEST_LOCK_TIMEOUT_SECONDS``) or out of reach (PostgreSQL down or restarting) is answered ``503`` with
``Retry-After``. A request FastAPI refuses in validation gets ``422`` naming each field and why, without the value sent
(:func:`validation_errors`). Ingest handles ``INGEST_CONCURRENCY`` requests at once per process: a body of up to
``SMALL_BODY_BYTES`` is decompressed and validated on the event loop, a larger one in a worker thread; the batches
being stored at the same moment share one database transaction, run in a worker thread
(:class:`finops.ingest.group_commit.GroupCommit`); a transaction PostgreSQL aborts to break a deadlock is run again
(up to :data:`finops.web.ingest_batch.DEADLOCK_ATTEMPTS` tries). Past ``IngestLimits.max_requests_under_way`` ingest
requests under way in a process, a new one is answered ``503`` with ``Retry-After`` at once, unread
(:mod:`finops.web.ingest_route`, which answers ingest ahead of FastAPI's routing).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import Scope

from finops.analysis.waste import ReasonPolicy
from finops.ingest.limits import IngestLimits
from finops.ingest.untimely import record_untimely
from finops.pricing.catalog import PriceCatalog
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.timeutil import from_epoch
from finops.web.alerts import create_alerts_router
from finops.web.auth import AdminBodies, ApiAuth, IngestAuth
from finops.web.body_limits import BodyBudget, BodyDeadline, BodyLimit
from finops.web.conformance import ERROR_RESPONSES, INGEST_OPENAPI, INGEST_RESPONSES, allow_every_method
from finops.web.deps import no_nul_parameters
from finops.web.ingest_route import (
    INGEST_PATH,
    IngestEndpoint,
    IngestFront,
    ServiceMetrics,
    database_refused,
    database_state,
)
from finops.web.rest import create_router

log = logging.getLogger(__name__)

REST_MAX_BODY_BYTES = 4 * 2**20
"""Largest body of any request but ingest: the price catalog YAML of ``PUT /api/v1/prices``, the largest, is about
20 KB (``finops/pricing/price_catalog.yaml``), the JSON bodies a few hundred bytes. A larger one is answered 413
before the route runs."""


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
    metrics = metrics or ServiceMetrics()
    app.state.metrics = metrics

    def untimely(node: str, counts: dict[str, int], error: str) -> None:
        record_untimely(sessions, node, counts, error, from_epoch(int(clock())))

    endpoint = IngestEndpoint(sessions, ingest_auth, limits, metrics, budget, clock, readings_in_tsdb, untimely)
    app.state.ingest = endpoint
    app.add_middleware(IngestFront, endpoint=endpoint)

    def timed_out(scope: Scope) -> None:
        if scope["path"] == INGEST_PATH:
            metrics.answered(408)

    # Added last, so outermost: it bounds the reads of BodyLimit, of ingest and of the routes alike.
    app.add_middleware(BodyDeadline, seconds=limits.body_timeout_seconds, on_timeout=timed_out)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming each refused field and why (:func:`validation_errors`), without echoing what was sent."""
        return JSONResponse({"detail": validation_errors(exc.errors())}, status_code=422)

    @app.exception_handler(OperationalError)
    async def database_busy(request: Request, exc: OperationalError) -> Response:
        """503 with ``Retry-After`` when the database is busy or out of reach
        (:func:`finops.web.ingest_route.database_state`), logged; any other OperationalError goes on to be a 500."""
        state = database_state(exc)
        if state is None:
            raise exc
        log.warning("database %s, %s %s answered 503: %s", state, request.method, request.url.path, exc.orig)
        return database_refused(state)

    @app.post(INGEST_PATH, openapi_extra=INGEST_OPENAPI, responses=INGEST_RESPONSES)
    async def ingest(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        content_encoding: Annotated[str | None, Header()] = None,
    ) -> Response:
        """Store a batch of GPU readings (wire format in :mod:`collector.contract.wire`), gzip or plain JSON. Most
        requests are answered by :class:`~finops.web.ingest_route.IngestFront` before routing; the others (with a
        query string, or under a root path) here, the same way."""
        return await endpoint.answer(request, authorization, content_encoding)

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
