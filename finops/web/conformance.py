"""What the HTTP API's OpenAPI document says of the answers that are not a route's own, and one HTTP rule Starlette
leaves out.

- :data:`ERROR_RESPONSES`: the errors any route of the REST API may answer (400, 401, 403, 408, 413, 422, 503),
  each with the body :class:`ErrorOut`, documented on every route (``include_router(responses=…)``): the OpenAPI
  document then describes every status and body a client gets, as Schemathesis checks
  (``tests/web/test_fuzz_api.py``).
- :data:`INGEST_OPENAPI`: the ingest route's body (:class:`collector.contract.wire.IngestBatch`) and answers, which
  FastAPI cannot see: the route reads its body itself, to bound it.
- :func:`allow_every_method`: a ``405 Method Not Allowed`` lists in ``Allow`` every method the path takes, as
  RFC 9110 §15.5.6 requires; Starlette lists only those of the first route of the path (``GET`` of
  ``/api/v1/team-rules``, not its ``PUT``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from collector.contract.wire import IngestBatch


class FieldError(BaseModel):
    """One refused field, FastAPI's validation error without the value sent (:func:`finops.web.app.validation_errors`):
    ``type`` (pydantic's error type, e.g. ``missing``), ``loc`` (where: ``["query", "start"]``) and ``msg`` (why)."""

    type: str
    loc: list[str | int]
    msg: str


class ErrorOut(BaseModel):
    """The body of an error: ``detail``, a sentence naming the parameter and why, or a list of refused fields."""

    detail: str | list[FieldError]


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("The body is not what the route reads (not JSON, or not UTF-8)."),
    401: _error("No credential, or one unknown, revoked or expired (with `WWW-Authenticate: Bearer`)."),
    403: _error("The credential's role may not do this (the detail names the role needed)."),
    408: _error("The body was not received within the body deadline; the connection is closed."),
    413: _error("The body is larger than the route takes."),
    422: _error("A parameter or field refused: the detail names each and why."),
    503: _error("The database is busy or unreachable; try again after `Retry-After` seconds."),
}
"""The error answers of every REST route, by status code (FastAPI's ``responses``)."""
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _error("The object named in the path does not exist.")}
"""``responses`` of a route that names an object in its path."""
CSV_TOO: dict[int | str, dict[str, Any]] = {200: {"content": {"text/csv": {"schema": {"type": "string"}}}}}
"""``responses`` of a route that answers ``format=csv`` with CSV text (besides JSON)."""
NOT_RETRIABLE = _error("The delivery is neither failed nor refused: there is nothing to retry.")
"""The 409 of retrying an alert delivery."""


class IngestOut(BaseModel):
    """The answer to an ingest batch stored, in whole or in part: readings ``accepted`` and each reading or entry
    ``rejected`` (its place, field and why: :mod:`finops.web.app`)."""

    accepted: int = Field(ge=0)
    rejected: list[dict[str, Any]]


class IngestRefusedOut(BaseModel):
    """The answer to an ingest batch refused in whole or in part: ``detail`` says why (a batch refused whole);
    ``accepted`` and ``rejected`` count what was stored and name what was not, for a batch whose readings were
    judged."""

    detail: str | list[FieldError] | None = None
    accepted: int | None = Field(default=None, ge=0)
    rejected: list[dict[str, Any]] | None = None


def _inlined(schema: Any, definitions: dict[str, Any]) -> Any:
    """``schema`` (pydantic's JSON Schema) with every ``{"$ref": "#/$defs/X"}`` replaced by ``definitions[X]``: the
    models of the wire format hold no cycle, and a schema set in ``openapi_extra`` cannot refer to ``$defs``."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _inlined(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
        return {key: _inlined(value, definitions) for key, value in schema.items() if key != "$defs"}
    if isinstance(schema, list):
        return [_inlined(item, definitions) for item in schema]
    return schema


def _ingest_body() -> dict[str, Any]:
    schema = IngestBatch.model_json_schema()
    inlined = _inlined(schema, schema.get("$defs", {}))
    return {
        "required": True,
        "description": "A batch of the wire format (collector.contract.wire), JSON, gzipped (Content-Encoding: "
        "gzip) or not.",
        "content": {"application/json": {"schema": inlined}},
    }


INGEST_OPENAPI: dict[str, Any] = {"requestBody": _ingest_body()}
"""``openapi_extra`` of the ingest route: its request body."""
INGEST_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": IngestOut, "description": "Every reading stored."},
    400: {"model": IngestRefusedOut, "description": "Not JSON, not gzip, or no batch: nothing stored."},
    401: ERROR_RESPONSES[401],
    403: {"model": ErrorOut, "description": "A node token sending another node's batch: nothing stored."},
    408: ERROR_RESPONSES[408],
    409: {"model": ErrorOut, "description": "Readings go to the TSDB (FINOPS_TELEMETRY_SOURCE=tsdb): nothing stored."},
    413: ERROR_RESPONSES[413],
    415: {"model": ErrorOut, "description": "A Content-Encoding other than gzip (or identity): nothing read."},
    422: {"model": IngestRefusedOut, "description": "Some readings or the whole batch refused, each named."},
    429: {"model": ErrorOut, "description": "Over the node's readings rate: nothing stored; retry after Retry-After."},
    503: _error(
        "The database is busy or unreachable, or the service has as many ingest requests under way as it takes: "
        "nothing stored; send again after `Retry-After` seconds, with the readings gathered meanwhile."
    ),
}
"""``responses`` of the ingest route."""


def allow_every_method(app: FastAPI) -> None:
    """Answer a ``405`` of ``app`` with ``Allow`` listing the methods of every route whose path matches the
    request's (a route's ``GET`` implies ``HEAD``)."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            methods: set[str] = set()
            for route in app.router.routes:
                match, _ = route.matches(request.scope)
                if match is not Match.NONE:
                    methods |= set(getattr(route, "methods", None) or ())
            headers = {**(exc.headers or {}), "Allow": ", ".join(sorted(methods))}
            exc = StarletteHTTPException(405, exc.detail, headers=headers)
        return await http_exception_handler(request, exc)
