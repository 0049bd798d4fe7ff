"""The service's HTTP API (FastAPI): ingest, health and Prometheus metrics.

Ingest policy for a batch with malformed readings: the valid readings are stored and the response is
``422`` with ``{"accepted": n, "rejected": [{"index": i, "field": "samples[i].name", "error": "…"}]}``; a
batch-level error (``node``, ``gpus``, not JSON) stores nothing. Collectors do not retry a 422.
"""

from __future__ import annotations

import gzip
import hmac
import logging
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Header, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from collector.wire import IngestBatch
from finops.ingest import Ingestor
from finops.rest import create_router

log = logging.getLogger(__name__)


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


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


def create_app(
    sessions: sessionmaker[Session],
    token: str | None,
    metrics: ServiceMetrics | None = None,
    api_token: str | None = None,
) -> FastAPI:
    """The FastAPI application: ingest, health, metrics and the REST API (:mod:`finops.rest`).

    ``token`` guards ingest and, when ``api_token`` is None, the REST API too; None disables authentication
    (refused by ``serve`` unless asked).
    """
    app = FastAPI(title="gpu-finops", version="0.1.0")
    app.include_router(create_router(sessions, api_token if api_token is not None else token))
    ingestor = Ingestor()
    metrics = metrics or ServiceMetrics()
    app.state.metrics = metrics

    def reply(code: int, body: dict[str, Any]) -> JSONResponse:
        metrics.requests.labels(code=str(code)).inc()
        return JSONResponse(body, status_code=code)

    @app.post("/api/v1/ingest")
    async def ingest(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        content_encoding: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        """Store a batch of GPU readings (wire format in :mod:`collector.wire`), gzip or plain JSON."""
        if token is not None and not hmac.compare_digest(authorization or "", f"Bearer {token}"):
            metrics.requests.labels(code="401").inc()
            raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
        body = await request.body()
        if content_encoding == "gzip":
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError) as exc:
                return reply(400, {"detail": f"body is not valid gzip: {exc}"})
        batch, rejected = _validate(body)
        if batch is None:
            return reply(422 if rejected else 400, {"accepted": 0, "rejected": rejected, "detail": "batch rejected"})
        accepted = await run_in_threadpool(_store, sessions, ingestor, batch)
        metrics.samples.inc(accepted)
        metrics.rejected.inc(len(rejected))
        return reply(422 if rejected else 200, {"accepted": accepted, "rejected": rejected})

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """200 when the database answers."""
        with sessions() as session:
            session.execute(text("SELECT 1"))
        return {"status": "ok"}

    @app.get("/metrics")
    def prometheus_metrics() -> Response:
        """The service's metrics in the Prometheus text format."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _store(sessions: sessionmaker[Session], ingestor: Ingestor, batch: IngestBatch) -> int:
    with sessions.begin() as session:
        return ingestor.store(session, batch)


def _validate(body: bytes) -> tuple[IngestBatch | None, list[dict[str, Any]]]:
    """The batch with its valid readings, and the rejected ones; (None, errors) if the batch itself is bad."""
    try:
        return IngestBatch.model_validate_json(body), []
    except ValidationError as exc:
        errors = exc.errors()
    rejected = [
        {"index": e["loc"][1], "field": _field_path(e["loc"]), "error": e["msg"]}
        for e in errors
        if len(e["loc"]) >= 2 and e["loc"][0] == "samples" and isinstance(e["loc"][1], int)
    ]
    if len(rejected) != len(errors):
        return None, [{"field": _field_path(e["loc"]), "error": e["msg"]} for e in errors]
    data = orjson.loads(body)
    bad = {r["index"] for r in rejected}
    data["samples"] = [s for i, s in enumerate(data["samples"]) if i not in bad]
    return IngestBatch.model_validate(data), rejected
