"""``POST /api/v1/ingest`` as one ASGI endpoint (:class:`IngestEndpoint`), served in front of FastAPI's routing
(:class:`IngestFront`): FastAPI's route matching, dependency solving and middleware took about half of the Python a
single-cycle POST ran outside its database transaction (docs/benchmarks.md, Fleet). What it checks is the same on
either path: the credential before any of the body is read, the body's bounds, the process's slots and memory
budget, the per-node limits (:mod:`finops.web.ingest_batch`), the body deadline
(:class:`finops.web.body_limits.BodyDeadline`, outside it); the FastAPI route of the same path (OpenAPI's description
of it, and the requests the front passes on) answers through the same :meth:`IngestEndpoint.answer`.

Past :attr:`finops.ingest.limits.IngestLimits.max_requests_under_way` ingest requests under way in the process (being
read, stored, or waiting for a slot), a new one is answered ``503`` with ``Retry-After``
(:data:`OVERLOAD_RETRY_AFTER_SECONDS`) and ``Connection: close`` at once, before its credential or body is read, and
counted in ``gpufinops_ingest_refused_total{reason="overload"}``: the service past the requests it takes asks the
collectors to slow down, and each then sends the cycles it gathered meanwhile as one POST
(:mod:`collector.delivery`), rather than queueing requests until they time out.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack, ExitStack
from functools import partial
from typing import Any

import anyio
import orjson
import psycopg
from fastapi import HTTPException
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

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
from finops.web.auth import IngestAuth
from finops.web.body_limits import BodyBudget, too_large
from finops.web.gzip_body import MAX_BODY_BYTES
from finops.web.ingest_batch import Gate, Untimely, ingest_batch, store_together

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/ingest"
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
RETRY_AFTER_SECONDS = 5
"""``Retry-After`` of the 503 answered when the database is busy (a write lock held by a rollup, a lock wait
that timed out), and of the 429 to a node's request beyond its slots: long enough for a rollup's transaction to
end, short against a collector's cycle."""
OVERLOAD_RETRY_AFTER_SECONDS = 30
"""``Retry-After`` of the 503 answered past :attr:`IngestLimits.max_requests_under_way`: three of a collector's
10-second cycles, which it then sends as one POST, spacing its next POSTs likewise while that pace decays
(:mod:`collector.delivery`): a fleet about three times the requests the service takes is brought within them."""
READINGS_IN_TSDB = (
    "the telemetry source is a TSDB (FINOPS_TELEMETRY_SOURCE=tsdb): send readings to the TSDB (dcgm-exporter scraped "
    "by it, or remote-write), not to this service"
)
"""The 409's ``detail`` of ingest when the service reads telemetry from a TSDB."""
GZIP_CODINGS = frozenset({"gzip", "x-gzip"})
"""``Content-Encoding`` values of a gzipped body, compared without case (content codings are case-insensitive, and a
recipient ought to take ``x-gzip`` as ``gzip``: RFC 9110, 8.4.1). Without the header, or with ``identity``, the body is
plain JSON; any other coding is answered ``415`` naming the header, with ``Accept-Encoding: gzip`` (RFC 9110, 15.5.16),
where the body was once parsed as JSON and refused as "Invalid JSON"."""
REFUSAL_REASONS = ("rate", "burst", "gpus", "requests", "overload")
"""``reason`` of ``gpufinops_ingest_refused_total``: the limit a batch was refused by."""


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
            "Ingest batches refused whole by a limit: rate (over the node's readings per second, 429), burst (more "
            "readings than the burst, 422), gpus (more GPUs than a batch may carry, 422), requests (more requests "
            "under way than a node token may have at once, 429), overload (more ingest requests under way in the "
            "process than it takes, 503).",
            ["reason"],
            registry=self.registry,
        )
        for reason in REFUSAL_REASONS:
            self.refused.labels(reason=reason)

    def answered(self, code: int) -> None:
        """Count an ingest request answered with HTTP status ``code``."""
        self.requests.labels(code=str(code)).inc()


BUSY = "busy (a lock held by another transaction)"
UNAVAILABLE = "unavailable (down, restarting or unreachable)"


def database_state(exc: OperationalError) -> str | None:
    """How the database failed a request, for a 503 answer: :data:`BUSY` (SQLite's "database is locked": its busy
    timeout ran out while another connection held the write lock; PostgreSQL's ``lock_not_available``, a lock wait
    that timed out, or ``deadlock_detected`` once ingest's retries are spent), :data:`UNAVAILABLE` (PostgreSQL down,
    starting or shutting down, refusing connections, or the connection lost during the request: any other
    ``psycopg.OperationalError``; the pool checks a connection before lending it, ``pool_pre_ping``, so the next
    request reconnects), or None (another failure: a 500)."""
    cause = exc.orig
    if isinstance(cause, psycopg.errors.LockNotAvailable | psycopg.errors.DeadlockDetected):
        return BUSY
    if isinstance(cause, sqlite3.OperationalError) and "locked" in str(cause):
        return BUSY
    if isinstance(cause, psycopg.OperationalError) or exc.connection_invalidated:
        return UNAVAILABLE
    return None


def database_refused(state: str) -> Response:
    """The 503 answer to a request the database failed (``state``: :func:`database_state`), with ``Retry-After``."""
    detail = {"detail": f"the database is {state}; try again later"}
    return _json(503, detail, {"Retry-After": str(RETRY_AFTER_SECONDS)})


def _json(code: int, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), code, headers, media_type="application/json")


class IngestEndpoint:
    """Ingest's request handling, its limits' state included (per process): see :func:`finops.web.app.create_app`
    for the policy, and the module docstring for the overload answer.

    Args:
        sessions: the request sessions, which batches are stored and untimely readings recorded with.
        auth: the ingest credentials.
        limits: what ingest accepts.
        metrics: the service's series (requests by code, refusals by reason, readings stored and rejected).
        budget: the request bodies' memory budget, shared with the other routes.
        clock: the wall clock, epoch seconds.
        readings_in_tsdb: answer every authenticated batch 409 (:data:`READINGS_IN_TSDB`), storing nothing.
        untimely: told of readings refused for their time (:data:`finops.web.ingest_batch.Untimely`).
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        auth: IngestAuth,
        limits: IngestLimits,
        metrics: ServiceMetrics,
        budget: BodyBudget,
        clock: Callable[[], float],
        readings_in_tsdb: bool,
        untimely: Untimely,
    ) -> None:
        self.auth, self.limits, self.metrics, self.budget, self.clock = auth, limits, metrics, budget, clock
        self.readings_in_tsdb, self.untimely = readings_in_tsdb, untimely
        store = partial(store_together, sessions, Ingestor(), max_gpus_per_node=limits.max_gpus_per_node)
        self.commits = GroupCommit(store, INGEST_CONCURRENCY)
        self.buckets = ReadingBuckets(limits.readings_per_second, limits.readings_burst, clock)
        self.slots = anyio.CapacityLimiter(INGEST_CONCURRENCY)
        self.large_slots = anyio.CapacityLimiter(LARGE_INGEST_CONCURRENCY)
        self.node_slots, self.large_node_slots = NodeSlots(REQUESTS_PER_NODE), NodeSlots(LARGE_REQUESTS_PER_NODE)
        self.under_way = 0
        """Ingest requests of this process being answered (event loop only)."""

    async def answer(self, request: Request, authorization: str | None, content_encoding: str | None) -> Response:
        """The answer to one ingest request (its ``Authorization`` and ``Content-Encoding`` header values given);
        raises what the request cannot be answered for (the client gone, the body deadline passed, a bug)."""
        if self.under_way >= self.limits.max_requests_under_way:
            return self._overloaded()
        self.under_way += 1
        try:
            return await self._answer(request, authorization, content_encoding)
        except HTTPException as exc:  # the credential refused
            self.metrics.answered(exc.status_code)
            return _json(exc.status_code, {"detail": exc.detail}, exc.headers)
        except OperationalError as exc:
            state = database_state(exc)
            if state is None:
                raise
            log.warning("database %s, POST %s answered 503: %s", state, INGEST_PATH, exc.orig)
            self.metrics.answered(503)
            return database_refused(state)
        finally:
            self.under_way -= 1

    def _overloaded(self) -> Response:
        """503 with ``Retry-After`` past :attr:`IngestLimits.max_requests_under_way` (module docstring)."""
        self.metrics.refused.labels(reason="overload").inc()
        self.metrics.answered(503)
        most = self.limits.max_requests_under_way
        detail = (
            f"the service has {most} ingest requests under way, the most it takes at once; nothing stored: send "
            f"again in {OVERLOAD_RETRY_AFTER_SECONDS} s, with the readings gathered meanwhile"
        )
        headers = {"Retry-After": str(OVERLOAD_RETRY_AFTER_SECONDS), "Connection": "close"}  # the body is left unread
        return _json(503, {"detail": detail}, headers)

    def _reply(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
        self.metrics.answered(code)
        return _json(code, body, headers)

    def _too_many(self, node: str | None, most: int, kind: str) -> Response:
        """429 with ``Retry-After`` to a node token's request beyond the node's slots (:class:`NodeSlots`)."""
        self.metrics.refused.labels(reason="requests").inc()
        detail = (
            f"node {node!r} has {most} ingest requests{kind} under way, the most a node may have at once (a "
            f"collector sends one at a time); nothing stored, retry in {RETRY_AFTER_SECONDS} s"
        )
        # The body is left unread: close the connection rather than read on what a slow sender trickles.
        return self._reply(429, {"detail": detail}, {"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"})

    def _budget_refused(self) -> Response:
        self.metrics.answered(503)
        return self.budget.refused()

    async def _answer(self, request: Request, authorization: str | None, content_encoding: str | None) -> Response:
        # The shared token needs no database read: no worker thread for it.
        shared = self.auth.shared_admits(authorization)
        holder = None if shared else await anyio.to_thread.run_sync(self.auth.holder, authorization)
        if self.readings_in_tsdb:
            return self._reply(409, {"detail": READINGS_IN_TSDB})
        coding = (content_encoding or "identity").strip().lower()
        if coding not in GZIP_CODINGS | {"identity"}:
            detail = f"Content-Encoding {content_encoding!r} is not supported: send gzip, or plain JSON without it"
            headers = {"Accept-Encoding": "gzip", "Connection": "close"}  # the body is left unread
            return self._reply(415, {"detail": detail}, headers)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return self._reply(413, too_large(MAX_BODY_BYTES))
        node = None if holder is None else holder.node
        with ExitStack() as node_held:
            if not node_held.enter_context(self.node_slots.take(node)):
                return self._too_many(node, REQUESTS_PER_NODE, "")
            async with self.slots, AsyncExitStack() as held:
                reservation = held.enter_context(self.budget.held())
                if declared.isdigit() and not reservation.cover(int(declared)):
                    return self._budget_refused()
                body = bytearray()
                large = False
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        return self._reply(413, too_large(MAX_BODY_BYTES))
                    if not reservation.cover(len(body)):
                        return self._budget_refused()
                    if not large and len(body) > SMALL_BODY_BYTES:
                        large = True
                        if not held.enter_context(self.large_node_slots.take(node)):
                            large_bodies = f" with a body over {SMALL_BODY_BYTES} bytes"
                            return self._too_many(node, LARGE_REQUESTS_PER_NODE, large_bodies)
                        await held.enter_async_context(self.large_slots)
                window = TimeWindow.at(self.clock(), self.limits.retention_days, self.limits.future_grace_seconds)
                gate = Gate(self.buckets, self.limits.max_gpus_per_batch)
                payload, body = bytes(body), bytearray()
                code, answer = await ingest_batch(
                    self.commits, payload, coding in GZIP_CODINGS, window, holder, gate, self.untimely,
                    SMALL_BODY_BYTES,
                )  # fmt: skip
        if gate.refused is not None:
            self.metrics.refused.labels(reason=gate.refused).inc()
        if gate.retry_after:
            return self._reply(code, answer, {"Retry-After": str(gate.retry_after)})
        if "detail" not in answer:  # stored: count what was kept and what was left out
            self.metrics.samples.inc(answer["accepted"])
            self.metrics.rejected.inc(sum(r.get("readings", 1) for r in answer["rejected"]))
        return self._reply(code, answer)


class IngestFront:
    """ASGI middleware answering ``POST`` :data:`INGEST_PATH` (without a query string) with ``endpoint`` directly,
    before FastAPI's routing, dependencies and the middleware inside it; every other request goes on to ``app``
    (the ingest route there answers through the same endpoint)."""

    def __init__(self, app: ASGIApp, endpoint: IngestEndpoint) -> None:
        self.app, self.endpoint = app, endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == INGEST_PATH and scope["method"] == "POST" \
                and not scope["query_string"]:  # fmt: skip
            request = Request(scope, receive)
            headers = request.headers
            answer = await self.endpoint.answer(request, headers.get("authorization"), headers.get("content-encoding"))
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)
