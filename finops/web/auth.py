"""Bearer-token authentication shared by the HTTP API's routes: ingest (:mod:`finops.web.app`), the REST API
(:mod:`finops.web.rest`) and the alerts API (:mod:`finops.web.alerts`).

Ingest (:class:`IngestAuth`) takes a per-node token (:mod:`finops.ingest.node_tokens`), which admits batches of its
node only, or the shared ``FINOPS_INGEST_TOKEN``, which admits every node."""

# No ``from __future__ import annotations``: FastAPI resolves the dependency's annotations when routes are defined.

import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import Header, HTTPException
from sqlalchemy.orm import Session, sessionmaker

from finops.ingest.node_tokens import TokenHolder, authenticate, split_token
from finops.timeutil import utc_now


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


class IngestAuth:
    """Who may post an ingest batch. :meth:`holder` answers, for an ``Authorization`` header:

    - ``Bearer gft_…`` (a node token): its :class:`~finops.ingest.node_tokens.TokenHolder` if live, whose batches
      must name its node; unknown, revoked or expired: :func:`unauthorised` (also when ingest is ``open``);
    - ``Bearer <shared>``: None, any node;
    - anything else: :func:`unauthorised`, unless ``open`` (``serve --insecure-no-token``): None, any node.

    The shared token is compared first, in constant time; a node token costs one primary-key read.
    """

    def __init__(self, sessions: sessionmaker[Session], shared: str | None, open_: bool = False) -> None:
        self.sessions, self.shared, self.open = sessions, shared, open_

    def holder(self, authorization: str | None) -> TokenHolder | None:
        """The node token's holder, or None for a request that may speak for any node; raises 401 otherwise.
        Reads the database: call it from a worker thread."""
        if self.shared is not None and bearer_ok(authorization, self.shared):
            return None
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and split_token(presented.strip()) is not None:
            holder = authenticate(self.sessions, presented.strip(), utc_now())
            if holder is None:
                raise unauthorised()
            return holder
        if self.open:
            return None
        raise unauthorised()
