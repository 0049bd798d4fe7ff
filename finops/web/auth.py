"""Bearer-token authentication shared by the HTTP API's routes: ingest (:mod:`finops.web.app`), the REST API
(:mod:`finops.web.rest`) and the alerts API (:mod:`finops.web.alerts`)."""

# No ``from __future__ import annotations``: FastAPI resolves the dependency's annotations when routes are defined.

import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import Header, HTTPException


def bearer_ok(authorization: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header value (None: no header) is ``Bearer <token>``, compared in constant
    time; always True when ``token`` is None (authentication off)."""
    return token is None or hmac.compare_digest(authorization or "", f"Bearer {token}")


def unauthorised() -> HTTPException:
    """The 401 answer to a request without the bearer token: ``{"detail": "missing or invalid bearer token"}``
    with ``WWW-Authenticate: Bearer``."""
    return HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


def require_bearer(token: str | None) -> Callable[..., None]:
    """A FastAPI dependency (for ``Depends``) that refuses a request with :func:`unauthorised` unless its
    ``Authorization`` header is ``Bearer <token>``; ``token`` None lets every request through."""

    def authorised(authorization: Annotated[str | None, Header()] = None) -> None:
        if not bearer_ok(authorization, token):
            raise unauthorised()

    return authorised
