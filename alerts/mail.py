"""E-mail notifications over SMTP: multipart text + HTML, STARTTLS required by default.

Message format: RFC 5322 through :class:`email.message.EmailMessage` (``Date`` in UTC, a ``Message-ID`` from
:func:`email.utils.make_msgid`), ``multipart/alternative`` with a text and an HTML part. Transport: RFC 3207
STARTTLS (``tls="starttls"``, the default) or implicit TLS (``tls="implicit"``, RFC 8314 port 465); credentials
are only ever sent on an encrypted connection: a server that does not offer STARTTLS gets none and the attempt
is refused. ``tls="none"`` exists for a local relay without authentication and refuses credentials.
"""

from __future__ import annotations

import html
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from alerts.message import Message
from alerts.slack import Attempt

TRANSIENT_SMTP_CODES = range(400, 500)


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    """Where and how to send.

    Attributes:
        host, port: the SMTP server (587 for STARTTLS submission, 465 for implicit TLS).
        sender: the ``From`` address.
        tls: ``"starttls"`` (required), ``"implicit"`` or ``"none"`` (no credentials allowed).
        username, password: SMTP AUTH credentials, or None; the password is never logged.
        ssl_context: certificate verification; default: the system's trust store.
        timeout_seconds: per connection.
    """

    host: str
    port: int
    sender: str
    tls: str = "starttls"
    username: str | None = None
    password: str | None = None
    ssl_context: ssl.SSLContext | None = None
    timeout_seconds: float = 30.0


def build_email(message: Message, sender: str, recipients: list[str]) -> EmailMessage:
    """The RFC 5322 message: subject = title, text part and an HTML part with the same content."""
    email = EmailMessage()
    email["From"] = sender
    email["To"] = ", ".join(recipients)
    email["Subject"] = message.title
    email["Date"] = formatdate(usegmt=True)
    email["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    email.set_content(message.plain_text())
    rows = "".join(
        f"<tr><th align='left'>{html.escape(name)}</th><td>{html.escape(value)}</td></tr>"
        for name, value in message.fields
    )
    link = ""
    if message.link is not None:
        label, url = message.link
        link = f"<p><a href='{html.escape(url, quote=True)}'>{html.escape(label)}</a></p>"
    email.add_alternative(
        f"<html><body><h2>{html.escape(message.title)}</h2><p>{html.escape(message.summary)}</p>"
        f"<table>{rows}</table>{link}</body></html>",
        subtype="html",
    )
    return email


def send_email(settings: SmtpSettings, message: Message, recipients: list[str]) -> Attempt:
    """Send ``message`` to ``recipients`` once: ``delivered``, ``failed`` (network, 4xx SMTP reply) or ``refused``."""
    has_credentials = settings.username is not None
    if has_credentials and settings.tls == "none":
        return Attempt("refused", f"{settings.host}: credentials are never sent without TLS")
    context = settings.ssl_context or ssl.create_default_context()
    email = build_email(message, settings.sender, recipients)
    try:
        if settings.tls == "implicit":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                settings.host, settings.port, timeout=settings.timeout_seconds, context=context
            )
        else:
            smtp = smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout_seconds)
        with smtp:
            smtp.ehlo()
            if settings.tls == "starttls":
                if not smtp.has_extn("starttls"):
                    return Attempt("refused", f"{settings.host}:{settings.port} does not offer STARTTLS")
                smtp.starttls(context=context)
                smtp.ehlo()
            if has_credentials:
                smtp.login(settings.username or "", settings.password or "")
            smtp.send_message(email)
    except smtplib.SMTPResponseException as exc:
        outcome = "failed" if exc.smtp_code in TRANSIENT_SMTP_CODES else "refused"
        return Attempt(outcome, f"{settings.host}:{settings.port}: SMTP {exc.smtp_code}")
    except smtplib.SMTPRecipientsRefused as exc:
        return Attempt("refused", f"{settings.host}:{settings.port}: recipients refused {sorted(exc.recipients)}")
    except (OSError, smtplib.SMTPException) as exc:
        return Attempt("failed", f"{settings.host}:{settings.port}: {exc.__class__.__name__}")
    return Attempt("delivered")
