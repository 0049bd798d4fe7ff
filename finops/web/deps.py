"""What the API routers share besides authentication (:mod:`finops.web.auth`): the database session dependency
and the parsing of request values into ``422 {"detail": "<name>: …"}`` answers.

Path ids are bounded (:data:`RowId`) and so is time text (:data:`INSTANT_MAX_LENGTH`); no text holds a NUL
character (:class:`InputModel` for bodies, :func:`no_nul_parameters` for paths and queries)."""

# No ``from __future__ import annotations``: FastAPI resolves the dependency's annotations when routes are defined.

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

from fastapi import HTTPException, Path, Request
from pydantic import BaseModel, BeforeValidator, field_validator
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.bounds import INT32_MAX, NUL_REFUSED
from finops.timeutil import parse_utc

RowId = Annotated[int, Path(ge=1, le=INT32_MAX, description="A row id: 1 to 2³¹ − 1.")]
"""A path id of a table row (``integer`` primary key): an id outside 1..:data:`INT32_MAX`, which no row can have,
is refused with 422 before any query (the database would fail on it)."""
INSTANT_MAX_LENGTH = 64
"""Longest time text :func:`instant` parses (characters); an ISO 8601 time with microseconds and offset is 32."""


def _holds_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    return isinstance(value, list | tuple | set | frozenset) and any(_holds_nul(item) for item in value)


class InputModel(BaseModel):
    """Base of the JSON request bodies: a field whose text (also inside lists and dicts) holds NUL is refused with
    FastAPI's 422 naming it (``loc: ["body", <field>]``, :data:`NUL_REFUSED`)."""

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if _holds_nul(value):
            raise ValueError(NUL_REFUSED)
        return value


def no_nul_parameters(request: Request) -> None:
    """An app-wide FastAPI dependency: 422 in FastAPI's shape (``[{"type": "value_error", "loc": ["path"|"query",
    <name>], "msg": …}]``) when a path or query parameter's name or value holds NUL (``%00``), before any route
    reads it."""
    for where, items in (("path", list(request.path_params.items())), ("query", request.query_params.multi_items())):
        for name, value in items:
            if _holds_nul(name) or _holds_nul(value):
                detail = [{"type": "value_error", "loc": [where, name], "msg": f"{name} {NUL_REFUSED}"}]
                raise HTTPException(422, detail)


def _ascii_number(value: object) -> object:
    if isinstance(value, str) and not value.isascii():
        raise ValueError("a number is written with ASCII digits (0-9), not full-width or other scripts' digits")
    return value


AsciiDecimal = Annotated[Decimal, BeforeValidator(_ascii_number)]
"""A Decimal parameter whose text must be ASCII: pydantic's Decimal, like Python's, takes ``１.５`` otherwise."""


def transaction(sessions: sessionmaker[Session]) -> Callable[[], Iterator[Session]]:
    """A FastAPI dependency yielding a session in a transaction of its own, committed when the route returns
    (rolled back if it raises). Use it with ``Depends(..., scope="function")``, so that the commit runs before
    the response is sent and a client reading right after a write sees it (with the default scope it would
    run after the response)."""

    def session() -> Iterator[Session]:
        with sessions.begin() as opened:
            yield opened

    return session


def instant(text: str, name: str) -> datetime:
    """``text`` as an aware UTC datetime (ISO 8601, UTC if it has no offset: :func:`finops.timeutil.parse_utc`);
    raises ``HTTPException`` 422 ``"<name>: '<text>' is not an ISO 8601 time"`` if it does not parse or is longer
    than :data:`INSTANT_MAX_LENGTH` (the text then cut to that length)."""
    refused = HTTPException(422, f"{name}: {text[:INSTANT_MAX_LENGTH]!r} is not an ISO 8601 time")
    if len(text) > INSTANT_MAX_LENGTH:
        raise refused
    try:
        return parse_utc(text)
    except (ValueError, OverflowError) as exc:  # OverflowError: an offset moving year 1 or 9999 out of range
        raise refused from exc


def one_of(value: str, name: str, allowed: Sequence[str]) -> str:
    """``value`` if it is in ``allowed``; else raises ``HTTPException`` 422 ``"<name>: must be one of a, b, …"``."""
    if value not in allowed:
        raise HTTPException(422, f"{name}: must be one of {', '.join(allowed)}")
    return value


@contextmanager
def unprocessable(error: type[Exception] = ValueError) -> Iterator[None]:
    """Turn an ``error`` (or subclass) raised in the block into ``HTTPException`` 422 with the exception's message
    as detail; other exceptions pass through."""
    try:
        yield
    except error as exc:
        raise HTTPException(422, str(exc)) from exc
