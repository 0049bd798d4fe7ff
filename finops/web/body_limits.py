"""Bounds on request bodies, as ASGI middleware of the service (:func:`finops.web.app.create_app`): a body over a
size is answered ``413`` before its route runs, and a body not received within a deadline ``408`` with its
connection closed."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


def too_large(limit: int, when: str = "") -> dict[str, str]:
    """The 413 answer's body for a request body over ``limit`` bytes (``when``: e.g. " once decompressed")."""
    return {"detail": f"body larger than {limit} bytes{when}"}


class BodyLimit:
    """ASGI middleware bounding request bodies: a body over ``limit`` bytes, declared (``Content-Length``) or as
    read, is answered 413 (:func:`too_large`) before the route runs, holding at most ``limit`` bytes; a body within
    it is read whole and handed on. Requests to ``exempt`` paths pass untouched (ingest bounds its own body)."""

    def __init__(self, app: ASGIApp, limit: int, exempt: frozenset[str]) -> None:
        self.app, self.limit, self.exempt = app, limit, exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        refused = JSONResponse(too_large(self.limit), status_code=413)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await refused(scope, receive, send)
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
            more = message.get("more_body", False)
        whole: Message | None = {"type": "http.request", "body": bytes(body), "more_body": False}

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
