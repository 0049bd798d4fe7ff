"""uvicorn as ``gpu-finops serve`` and ``scheduler`` run it, with their shutdown on SIGTERM or SIGINT.

:func:`serve_http` serves an ASGI app in this process until the signal, calling back at the signal (the scheduled
jobs' database work is stopped before anything else) and once the server listens with its signal handlers in place
(the scheduled jobs start then). :class:`HttpProtocol` is its HTTP protocol, and that of ``serve --workers N``:
its shutdown does not wait for idle TLS connections.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from finops.errors import FinopsError

SHUTDOWN_SECONDS = 5.0
"""After SIGTERM or SIGINT: how long :func:`serve_http` waits for the requests under way; the scheduled jobs' runs
are then given as long to end (:meth:`finops.cli.serve.ScheduledJobs.stop`)."""


class HttpProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """uvicorn's HTTP protocol (httptools, else h11) whose shutdown drops an idle TLS connection at once.

    At shutdown uvicorn closes each idle keep-alive connection and waits for the connections to be gone. Over TLS,
    closing sends close_notify and waits for the peer's (asyncio's ``ssl_shutdown_timeout``, 30 s); a collector
    holding an idle keep-alive connection never answers, so ``serve`` waited for it until
    :data:`SHUTDOWN_SECONDS` ran out. An idle connection with nothing left to send is aborted instead (the peer
    sees the connection reset, as after any server restart, and opens a new one). Plain TCP and connections with
    a request or response under way are closed as uvicorn closes them."""

    def shutdown(self) -> None:
        """Abort an idle TLS connection with an empty write buffer; anything else as uvicorn does."""
        transport = self.transport
        idle = self.cycle is None or self.cycle.response_complete
        if idle and transport.get_extra_info("sslcontext") is not None and transport.get_write_buffer_size() == 0:
            transport.abort()
        else:
            super().shutdown()


class _Server(uvicorn.Server):
    """uvicorn's server, which also calls ``on_signal`` as soon as a signal asks it to exit, and ``started`` (if any)
    once it has started, its signal handlers in place."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_signal: Callable[[int, FrameType | None], None],
        started: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_signal = on_signal
        self._started = started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit and self._started is not None:
            self._started()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_signal(sig, frame)
        super().handle_exit(sig, frame)


def serve_http(
    app: ASGIApp, stopping: Callable[[], None] | None, started: Callable[[], None] | None = None, **options: Any
) -> None:
    """Serve ``app`` with uvicorn (``options``: :class:`uvicorn.Config`'s) until SIGTERM or SIGINT; on the signal,
    call ``stopping`` (if any) first, then wait at most :data:`SHUTDOWN_SECONDS` for the requests under way, and
    return. ``started`` (if any) is called once the server listens, its signal handlers in place: work started there
    (the scheduled jobs) is stopped by a signal however soon it comes.

    uvicorn sends the signal again to the handler it found once it is done; that handler calls ``stopping`` too
    (the default one would end the process before the caller's clean-up). FinopsError when the server cannot
    start (the port is taken: uvicorn has logged why)."""

    def on_signal(sig: int, frame: FrameType | None) -> None:
        if stopping is not None:
            stopping()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        config = uvicorn.Config(app, http=HttpProtocol, timeout_graceful_shutdown=int(SHUTDOWN_SECONDS), **options)
        server = _Server(config, on_signal, started)
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started:
        raise FinopsError(f"the server did not start on {options.get('host')}:{options.get('port')}")
