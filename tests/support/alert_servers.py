"""Real local servers for alert tests: an HTTP server standing in for a Slack incoming webhook and an aiosmtpd
mailbox with STARTTLS and SMTP AUTH (its certificate from :class:`tests.support.certificates.Certificates`)."""

from __future__ import annotations

import json
import ssl
import threading
import time
from email import message_from_bytes
from email.message import Message as EmailMessage
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session

from tests.support.servers import free_port

SECRET_PATH = "/services/T000/B000/s3cr3t-token"


class Webhook:
    """A Slack-like webhook on 127.0.0.1 answering with queued (status, headers) pairs, then 200 ``ok``.

    ``received`` holds every JSON body in arrival order, ``received_at`` the ``time.time()`` of each, ``keys`` its
    ``Idempotency-Key`` header (None without one); ``url`` carries a secret-looking path, as a real Slack webhook
    URL does."""

    def __init__(self, *replies: tuple[int, dict[str, str]]) -> None:
        self.replies = list(replies)
        self.received: list[dict[str, Any]] = []
        self.received_at: list[float] = []
        self.keys: list[str | None] = []
        self.answered: list[int] = []
        self._lock = threading.Lock()
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with webhook._lock:
                    webhook.received.append(json.loads(body))
                    webhook.received_at.append(time.time())
                    webhook.keys.append(self.headers.get("Idempotency-Key"))
                    status, headers = webhook.replies.pop(0) if webhook.replies else (200, {})
                    webhook.answered.append(status)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else b"invalid_payload")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{SECRET_PATH}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def delivered(self) -> list[dict[str, Any]]:
        """The bodies this webhook answered 200 to: the messages a Slack channel would show."""
        with self._lock:
            return [body for body, status in zip(self.received, self.answered, strict=True) if status == 200]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Mailbox:
    """aiosmtpd handler keeping every message and every AUTH attempt."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.logins: list[tuple[bytes, bytes]] = []

    async def handle_DATA(self, server: object, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        self.messages.append(message_from_bytes(envelope.content, policy=default_policy))
        return "250 OK"

    def authenticate(self, server: object, session: Session, envelope: Envelope, mechanism: str, data: Any) -> Any:
        assert isinstance(data, LoginPassword)
        self.logins.append((data.login, data.password))
        return AuthResult(success=data.password == b"mail-secret")


def starttls_smtp(mailbox: Mailbox, tls_context: ssl.SSLContext) -> Controller:
    """A started aiosmtpd server on 127.0.0.1 that requires STARTTLS before AUTH and mail."""
    controller = Controller(
        mailbox, hostname="127.0.0.1", port=free_port(), tls_context=tls_context, require_starttls=True,
        authenticator=mailbox.authenticate, auth_require_tls=True,
    )  # fmt: skip
    controller.start()
    return controller
