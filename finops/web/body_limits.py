"""Bounds on request bodies, as ASGI middleware of the service (:func:`finops.web.app.create_app`): a body over a
size is answered ``413`` before its route runs, a body not received within a deadline ``408`` with its connection
closed, and a body that would take the bodies held at once past the process's memory budget (:class:`BodyBudget`)
``503`` with ``Retry-After``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


def too_large(limit: int, when: str = "") -> dict[str, str]:
    """The 413 answer's body for a request body over ``limit`` bytes (``when``: e.g. " once decompressed")."""
    return {"detail": f"body larger than {limit} bytes{when}"}


BUDGET_RETRY_AFTER_SECONDS = 1
"""``Retry-After`` of the 503 answered when the bodies held at once fill the budget (:class:`BodyBudget`): bodies
are read in well under a second on a datacentre network, and none is held longer than the body deadline."""


class BodyBudget:
    """The bytes of request bodies one server process holds at once, bounded by ``limit``
    (``FINOPS_BODY_MEMORY_BUDGET_BYTES``): each request takes what it declares (``Content-Length``) before reading
    and, without one, what it has read so far (:meth:`held`), and gives it back once answered. Bytes as received:
    what a route makes of them (a copy, the decompressed batch, parsed objects) is a small multiple, bounded by the
    same count. Used from the event loop only (no lock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0

    @contextmanager
    def held(self) -> Iterator[Reservation]:
        """A :class:`Reservation` of this budget, given back when the block ends."""
        reservation = Reservation(self)
        try:
            yield reservation
        finally:
            self.in_use -= reservation.bytes
            reservation.bytes = 0

    def refused(self) -> JSONResponse:
        """The 503 answer to a body the budget cannot take now, with ``Retry-After`` and ``Connection: close`` (the rest
        of the body is not read)."""
        detail = (
            f"the service holds {self.limit} bytes of request bodies at once (FINOPS_BODY_MEMORY_BUDGET_BYTES) and "
            f"they are taken; try again in {BUDGET_RETRY_AFTER_SECONDS} s"
        )
        headers = {"Retry-After": str(BUDGET_RETRY_AFTER_SECONDS), "Connection": "close"}  # the body is left unread
        return JSONResponse({"detail": detail}, status_code=503, headers=headers)


class Reservation:
    """The part of a :class:`BodyBudget` one request holds (:attr:`bytes`)."""

    def __init__(self, budget: BodyBudget) -> None:
        self.budget, self.bytes = budget, 0

    def cover(self, size: int) -> bool:
        """Grow the reservation to ``size`` bytes (no change when it holds that much); False, leaving it as it was,
        when the budget cannot take the difference now."""
        more = size - self.bytes
        if more <= 0:
            return True
        if self.budget.in_use + more > self.budget.limit:
            return False
        self.budget.in_use += more
        self.bytes = size
        return True


class BodyLimit:
    """ASGI middleware bounding request bodies: a body over ``limit`` bytes, declared (``Content-Length``) or as
    read, is answered 413 (:func:`too_large`) before the route runs, holding at most ``limit`` bytes; a body the
    ``budget`` cannot cover, declared or as read, 503 with ``Retry-After`` (:meth:`BodyBudget.refused`); a body
    within both is read whole and handed on, its bytes held in the budget until the route has answered. Requests to
    ``exempt`` paths pass untouched (ingest bounds its own body, in the same budget)."""

    def __init__(self, app: ASGIApp, limit: int, exempt: frozenset[str], budget: BodyBudget) -> None:
        self.app, self.limit, self.exempt, self.budget = app, limit, exempt, budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        refused = JSONResponse(too_large(self.limit), status_code=413)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await refused(scope, receive, send)
            return
        with self.budget.held() as reservation:
            if declared.isdigit() and not reservation.cover(int(declared)):
                await self.budget.refused()(scope, receive, send)
                return
            body, more = bytearray(), True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                if len(body) > self.limit:
                    await refused(scope, receive, send)
                    return
                if not reservation.cover(len(body)):
                    await self.budget.refused()(scope, receive, send)
                    return
                more = message.get("more_body", False)
            whole: Message | None = {"type": "http.request", "body": bytes(body), "more_body": False}
            del body

            async def replay() -> Message:
                nonlocal whole
                if whole is None:
                    return await receive()
                message, whole = whole, None
                return message

            await self.app(scope, replay, send)


class _BodyTimeout(Exception):
    """A request body not read whole within its deadline."""


class BodyDeadline:
    """ASGI middleware reading every request body under one overall deadline of ``seconds``, counted from the
    application's first read of it (an ingest request waiting for its slot is not the sender's delay): when the
    body is not all in by then the request is answered ``408`` with ``Connection: close``, so the server drops the
    connection and whatever the sender has yet to send, and ``on_timeout(scope)`` is called. uvicorn bounds only the
    wait between requests on a kept-alive connection (``--timeout-keep-alive``), not a body sent one byte at a time.
    A response already started when the deadline passes (not expected: bodies are read before answering) ends the
    connection without one."""

    def __init__(self, app: ASGIApp, seconds: float, on_timeout: Callable[[Scope], None]) -> None:
        self.app, self.seconds, self.on_timeout = app, seconds, on_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline: float | None = None
        body_read = started = False

        async def bounded() -> Message:
            nonlocal deadline, body_read
            if body_read:  # the body is in: later reads wait for the client to go away, unbounded
                return await receive()
            now = anyio.current_time()
            deadline = now + self.seconds if deadline is None else deadline
            try:
                with anyio.fail_after(max(0.0, deadline - now)):
                    message = await receive()
            except TimeoutError:
                raise _BodyTimeout from None
            body_read = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded, tracked)
        except _BodyTimeout:
            log.warning(
                "%s %s: body not received within %g s; answered 408", scope["method"], scope["path"], self.seconds
            )
            self.on_timeout(scope)
            if started:
                raise
            detail = {"detail": f"request body not received within {self.seconds:g} s"}
            await JSONResponse(detail, status_code=408, headers={"Connection": "close"})(scope, receive, send)
