"""REST routes for alerts, silences and deliveries under ``/api/v1/alerts`` (FastAPI router).

Same conventions as :mod:`finops.web.rest`: ``Authorization: Bearer <token>`` (reading: any role, a ``team`` token
seeing only its team's alerts and the silences that name its team; the outbox: viewer or admin; changing: admin), times
ISO 8601 UTC, errors JSON ``{"detail": "…"}`` naming the field.

- ``GET /alerts?state=firing|resolved|all``: alerts, newest first, with ``muted``;
- ``GET /alerts/silences?include_expired=``: silences;
- ``POST /alerts/silences`` ``{"matchers": ["team=\\"vision\\""], "ends_at", "starts_at"?, "comment",
  "created_by"}``: 201 ``{"id"}``;
- ``DELETE /alerts/silences/{id}``: expire it now (204; 404 if none is in force; 422 for an id out of range);
- ``GET /alerts/deliveries?status=failed&status=refused``: outbox rows (default failed and refused);
- ``POST /alerts/deliveries/{id}/retry``, ``POST /alerts/deliveries/retry`` (every failed or refused one): queue
  again.
"""

# No ``from __future__ import annotations``: FastAPI resolves the dependency annotations when routes are defined.

from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import Field
from sqlalchemy.orm import Session, sessionmaker

from alerts.matchers import names_team
from alerts.models import DELIVERY_STATUSES, AlertDelivery
from alerts.store import (
    RETRIABLE,
    create_silence,
    expire_silence,
    list_deliveries,
    list_silences,
    retry_deliveries,
    select_alerts,
)
from finops.access.api_tokens import Principal
from finops.timeutil import utc_now
from finops.web.auth import ApiAuth
from finops.web.conformance import NOT_FOUND, NOT_RETRIABLE
from finops.web.deps import InputModel, RowId, instant, transaction, unprocessable

DEFAULT_DEADLINE = timedelta(hours=1)
MAX_MATCHERS = 64
"""Most matchers a silence may have."""
MATCHER_MAX_LENGTH = 1024
"""Longest matcher text (characters), e.g. ``team="vision"``."""
COMMENT_MAX_LENGTH = 10_000
"""Longest silence comment (characters)."""
CREATED_BY_MAX_LENGTH = 128
"""Longest ``created_by`` (characters): the width of ``alert_silences.created_by``."""


class SilenceIn(InputModel):
    """A silence to create: 1 to :data:`MAX_MATCHERS` Alertmanager matchers (each up to :data:`MATCHER_MAX_LENGTH`
    characters), until ``ends_at`` (from ``starts_at``, default now), ``comment`` up to :data:`COMMENT_MAX_LENGTH`
    and ``created_by`` up to :data:`CREATED_BY_MAX_LENGTH` characters; longer is refused with 422."""

    matchers: list[Annotated[str, Field(max_length=MATCHER_MAX_LENGTH)]] = Field(min_length=1, max_length=MAX_MATCHERS)
    ends_at: str
    starts_at: str | None = None
    comment: str = Field("", max_length=COMMENT_MAX_LENGTH)
    created_by: str = Field("", max_length=CREATED_BY_MAX_LENGTH)


def create_alerts_router(
    sessions: sessionmaker[Session], auth: ApiAuth, deadline: timedelta = DEFAULT_DEADLINE
) -> APIRouter:
    """The ``/api/v1/alerts`` routes on ``sessions``, authenticated by ``auth``. A delivery retried by hand gets
    ``deadline`` to be delivered."""
    router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])
    reader = Annotated[Principal, Depends(auth.reader)]
    fleet_reader = Annotated[Principal, Depends(auth.fleet_reader)]
    admin = Annotated[Principal, Depends(auth.admin)]
    # scope="function": the transaction commits before the response is sent, so a client that reads right after a
    # write sees it (with the default, the commit would run after the response).
    db = Annotated[Session, Depends(transaction(sessions), scope="function")]

    @router.get("")
    def alerts(db: db, caller: reader, state: Literal["firing", "resolved", "all"] = "firing") -> list[dict[str, Any]]:
        """Alerts in ``state``, newest first; ``muted`` when a silence or an inhibition holds one back. A team
        token: alerts whose ``team`` label is its team."""
        return [
            {
                "fingerprint": a.fingerprint,
                "rule": a.rule,
                "severity": a.severity,
                "state": a.state,
                "labels": a.labels,
                "starts_at": a.starts_at.isoformat(),
                "ends_at": None if a.ends_at is None else a.ends_at.isoformat(),
                "title": a.title,
                "summary": a.summary,
                "muted": a.muted,
            }
            for a in select_alerts(db, utc_now(), state, team=caller.team_scope)
        ]

    @router.get("/silences")
    def silences(db: db, caller: reader, include_expired: bool = False) -> list[dict[str, Any]]:
        """Silences not yet ended (all with ``include_expired``); a team token: those with a matcher
        ``team="<its team>"``."""
        return [
            {
                "id": s.id,
                "matchers": s.matchers,
                "starts_at": s.starts_at.isoformat(),
                "ends_at": s.ends_at.isoformat(),
                "created_by": s.created_by,
                "comment": s.comment,
                "active": s.active,
            }
            for s in list_silences(db, utc_now(), include_expired=include_expired)
            if caller.team_scope is None or names_team(s.matchers, caller.team_scope)
        ]

    @router.post("/silences", status_code=201)
    def post_silence(db: db, caller: admin, body: SilenceIn) -> dict[str, int]:
        """Create a silence; 422 naming the problem (a matcher that does not parse, an end not after the start)."""
        ends = instant(body.ends_at, "ends_at")
        starts = None if body.starts_at is None else instant(body.starts_at, "starts_at")
        with unprocessable():
            silence_id = create_silence(
                db,
                body.matchers,
                ends,
                utc_now(),
                starts_at=starts,
                created_by=body.created_by,
                comment=body.comment,
                actor=caller.actor,
            )
        return {"id": silence_id}

    @router.delete("/silences/{silence_id}", status_code=204, responses=NOT_FOUND)
    def delete_silence(db: db, caller: admin, silence_id: RowId) -> Response:
        """Expire a silence now; 404 if there is none still in force, 422 for an id no row can have."""
        if not expire_silence(db, silence_id, utc_now(), actor=caller.actor):
            raise HTTPException(404, f"no silence {silence_id} in force")
        return Response(status_code=204)

    @router.get("/deliveries")
    def deliveries(
        db: db,
        caller: fleet_reader,
        status: Annotated[list[str] | None, Query(description=f"Any of {', '.join(DELIVERY_STATUSES)}.")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    ) -> list[dict[str, Any]]:
        """Outbox rows in ``status`` (default failed and refused), newest first."""
        chosen = status or list(RETRIABLE)
        unknown = sorted(set(chosen) - set(DELIVERY_STATUSES))
        if unknown:
            raise HTTPException(422, f"status: {unknown[0]!r} is not one of {', '.join(DELIVERY_STATUSES)}")
        return [d.as_dict() for d in list_deliveries(db, chosen, limit=limit)]

    @router.post("/deliveries/retry")
    def retry_all(db: db, caller: admin) -> dict[str, list[int]]:
        """Queue every failed or refused delivery again."""
        return {"retried": retry_deliveries(db, utc_now(), deadline, actor=caller.actor)}

    @router.post("/deliveries/{delivery_id}/retry", responses={**NOT_FOUND, 409: NOT_RETRIABLE})
    def retry_one(db: db, caller: admin, delivery_id: RowId) -> dict[str, list[int]]:
        """Queue one failed or refused delivery again; 409 if it is pending or delivered, 404 if unknown, 422 for an
        id no row can have."""
        retried = retry_deliveries(db, utc_now(), deadline, [delivery_id], actor=caller.actor)
        if not retried:
            if db.get(AlertDelivery, delivery_id) is None:
                raise HTTPException(404, f"no delivery {delivery_id}")
            raise HTTPException(409, f"delivery {delivery_id} is not failed or refused")
        return {"retried": retried}

    return router
