"""What the API routers share besides authentication (:mod:`finops.web.auth`): the database session dependency
and the parsing of request values into ``422 {"detail": "<name>: …"}`` answers.

Path ids are bounded (:data:`RowId`) and so is time text (:data:`INSTANT_MAX_LENGTH`)."""

# No ``from __future__ import annotations``: FastAPI resolves the dependency's annotations when routes are defined.

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated

from fastapi import HTTPException, Path
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import INT32_MAX
from finops.timeutil import parse_utc

RowId = Annotated[int, Path(ge=1, le=INT32_MAX, description="A row id: 1 to 2³¹ − 1.")]
"""A path id of a table row (``integer`` primary key): an id outside 1..:data:`INT32_MAX`, which no row can have,
is refused with 422 before any query (the database would fail on it)."""
INSTANT_MAX_LENGTH = 64
"""Longest time text :func:`instant` parses (characters); an ISO 8601 time with microseconds and offset is 32."""


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
