"""A client that trickles a request body over a real socket, one byte a second: what a slow (or hostile) sender
does to the service's body deadline and ingest slots."""

from __future__ import annotations

import select
import socket
import threading
import time

WAIT = 15.0
"""Default bound of the socket's reads, in seconds."""


class SlowSender:
    """Sends a POST's headers to ``url`` + ``path`` (bearer ``token``, declaring ``length`` bytes of body), then one
    byte a second until the service closes the connection or :meth:`answer` is called."""

    def __init__(self, url: str, path: str, token: str, length: int = 1000, wait: float = WAIT) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=wait)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        )
        self.sock.sendall(head.encode())
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.sock.sendall(b" ")
            except OSError:  # the service closed the connection
                return

    def answered(self) -> bool:
        """Whether any of a response has arrived (or the connection was closed), without waiting."""
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable)

    def answer(self) -> tuple[bytes, float, bool]:
        """The response as read until the service closes the connection, the seconds it took from the headers, and
        whether the connection was closed (not timed out)."""
        data, closed = b"", False
        try:
            while chunk := self.sock.recv(65536):
                data += chunk
            closed = True
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            pass
        took = time.monotonic() - self.started
        self.close()
        return data, took, closed

    def close(self) -> None:
        """Stop sending and close the socket."""
        self.stop.set()
        self.thread.join(timeout=WAIT)
        self.sock.close()
