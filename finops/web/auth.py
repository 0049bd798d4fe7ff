"""Bearer-token authentication of the HTTP API's routes: ingest (:mod:`finops.web.app`), the REST API
(:mod:`finops.web.rest`, :mod:`finops.web.alerts`) and the service's own ``/metrics`` and OpenAPI pages.

Ingest (:class:`IngestAuth`) takes a per-node token (:mod:`finops.ingest.node_tokens`), which admits batches of its
node only, or the shared ``FINOPS_INGEST_TOKEN``, which admits every node. Everything else (:class:`ApiAuth`) takes
an API token with a role (:mod:`finops.access.api_tokens`) or the ``FINOPS_API_TOKEN`` setting (an admin); an ingest
credential never opens it. 401 without a credential or with a bad one, 403 for a role that may not.

A request carrying a body is judged on its headers before any of its body is read (:class:`AdminBodies`): only
admin routes of the REST API take a body, and ingest authenticates before it reads its own."""

# No ``from __future__ import annotations``: FastAPI resolves the dependency's annotations when routes are defined.

import hmac
from typing import Annotated

import anyio
from fastapi import Header, HTTPException
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import Headers
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from finops.access import api_tokens
from finops.access.api_tokens import ADMIN_SETTING, Principal, Role
from finops.ingest.node_tokens import TokenHolder, authenticate, split_token
from finops.timeutil import utc_now

ANONYMOUS = Principal("anonymous", "admin")
"""Who a request is when the REST API is open (``serve --insecure-no-token`` with no API credential anywhere)."""


def bearer_ok(authorization: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header value (None: no header) is ``Bearer <token>``, compared in constant
    time; always True when ``token`` is None (authentication off)."""
    # As UTF-8 bytes: compare_digest refuses str with non-ASCII characters (TypeError), which a header may hold.
    presented, expected = (authorization or "").encode(errors="surrogateescape"), f"Bearer {token}".encode()
    return token is None or hmac.compare_digest(presented, expected)


def unauthorised() -> HTTPException:
    """The 401 answer to a request without the bearer token: ``{"detail": "missing or invalid bearer token"}``
    with ``WWW-Authenticate: Bearer``."""
    return HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


def forbidden(principal: Principal, needs: str) -> HTTPException:
    """The 403 answer to a credential whose role may not do what was asked (``needs``: e.g. ``an admin token``)."""
    scope = f" of team {principal.team!r}" if principal.team else ""
    detail = f"a {principal.role} token{scope} may not do this; it needs {needs} (gpu-finops api-token create)"
    return HTTPException(403, detail)


class ApiAuth:
    """Who may use the REST API, ``/metrics`` and the OpenAPI pages. :meth:`principal` answers, for an
    ``Authorization`` header:

    - ``Bearer gfa_…`` (an API token): its :class:`~finops.access.api_tokens.Principal` if live, else 401;
    - ``Bearer <FINOPS_API_TOKEN>`` (``setting``): :data:`~finops.access.api_tokens.ADMIN_SETTING`;
    - anything else (no header, an ingest token, …): 401, unless ``open_`` (no credential configured and
      ``serve --insecure-no-token``): :data:`ANONYMOUS`, an admin.

    The methods :meth:`reader`, :meth:`fleet_reader` and :meth:`admin` are FastAPI dependencies (``Depends``) that
    give the request's principal, or refuse it with 403 when its role may not. They read the database (an API
    token costs one primary-key read): FastAPI runs them in a worker thread.
    """

    def __init__(self, sessions: sessionmaker[Session], setting: str | None, open_: bool = False) -> None:
        self.sessions, self.setting, self.open = sessions, setting, open_

    def principal(self, authorization: str | None) -> Principal:
        """The principal of ``authorization``, or :func:`unauthorised` raised."""
        scheme, _, presented = (authorization or "").partition(" ")
        presented = presented.strip()
        if scheme.lower() == "bearer" and api_tokens.split_token(presented) is not None:
            principal = api_tokens.authenticate(self.sessions, presented, utc_now())
            if principal is None:
                raise unauthorised()
            return principal
        if self.setting is not None and bearer_ok(authorization, self.setting):
            return ADMIN_SETTING
        if self.open and not authorization:
            return ANONYMOUS
        raise unauthorised()

    def _with_role(self, authorization: str | None, roles: tuple[Role, ...], needs: str) -> Principal:
        principal = self.principal(authorization)
        if principal.role not in roles:
            raise forbidden(principal, needs)
        return principal

    def reader(self, authorization: Annotated[str | None, Header()] = None) -> Principal:
        """Any role: a ``team`` principal then sees only its team's rows."""
        return self.principal(authorization)

    def fleet_reader(self, authorization: Annotated[str | None, Header()] = None) -> Principal:
        """``viewer`` or ``admin``: what shows every team at once and cannot be cut to one (``/metrics``, the
        outbox of deliveries)."""
        return self._with_role(authorization, ("viewer", "admin"), "a viewer or admin token")

    def admin(self, authorization: Annotated[str | None, Header()] = None) -> Principal:
        """``admin`` only: changes (budgets, prices, rules, silences, deliveries) and the audit log."""
        return self._with_role(authorization, ("admin",), "an admin token")


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

    def shared_admits(self, authorization: str | None) -> bool:
        """Whether ``authorization`` is the shared token (constant time, no database): :meth:`holder` would answer
        None, so a caller may skip it."""
        return self.shared is not None and bearer_ok(authorization, self.shared)

    def holder(self, authorization: str | None) -> TokenHolder | None:
        """The node token's holder, or None for a request that may speak for any node; raises 401 otherwise.
        Reads the database for a node token: call it from a worker thread."""
        if self.shared_admits(authorization):
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


BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The methods whose routes read a body. A body sent with another method (GET, TRACE, …) is never read: its route
takes none, or there is no route and the answer is 405."""


def _carries_body(scope: Scope) -> bool:
    """Whether a request of :data:`BODY_METHODS` declares a body: ``Content-Length`` other than 0, or
    ``Transfer-Encoding`` (chunked)."""
    if scope["method"] not in BODY_METHODS:
        return False
    headers = Headers(scope=scope)
    return headers.get("content-length", "0").strip() not in ("", "0") or "transfer-encoding" in headers


def _routed(scope: Scope) -> bool:
    """Whether a route of the application takes the request's path and method; a request no route takes is answered
    404 or 405 by the router without reading its body, as for anyone."""
    routes = getattr(getattr(scope.get("app"), "router", None), "routes", ())
    return any(route.matches(scope)[0] is Match.FULL for route in routes)


class AdminBodies:
    """ASGI middleware authenticating every request that carries a body (:func:`_carries_body`) from its
    ``Authorization`` header before any of the body is read: every route of the REST API that takes a body is an admin's
    (:meth:`ApiAuth.admin`), so without an admin credential the request is answered 401 (none or a bad one) or 403
    (another role) with ``Connection: close``, and the server reads no more of it than its socket buffers hold. A
    request no route takes (:func:`_routed`) passes, to get its 404 or 405. Without this an unauthenticated client
    could make the process hold a body of :data:`finops.web.app.REST_MAX_BODY_BYTES` per connection. Requests to
    ``exempt`` paths (ingest: it authenticates before reading, with ingest credentials) and without a body pass
    untouched."""

    def __init__(self, app: ASGIApp, auth: ApiAuth, exempt: frozenset[str]) -> None:
        self.app, self.auth, self.exempt = app, auth, exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self.exempt and _carries_body(scope) and _routed(scope):
            authorization = Headers(scope=scope).get("authorization")
            try:
                await anyio.to_thread.run_sync(self.auth.admin, authorization)  # an API token is a database read
            except HTTPException as exc:
                headers = {**(exc.headers or {}), "Connection": "close"}
                refusal = JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
