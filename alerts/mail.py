"""E-mail notifications over SMTP: multipart text + HTML, STARTTLS required by default.

Message format: RFC 5322 through :class:`email.message.EmailMessage` (``Date`` in UTC, a ``Message-ID`` from
:func:`email.utils.make_msgid`), ``multipart/alternative`` with a text and an HTML part. The HTML is written for
mail clients, which drop ``<style>`` blocks and external CSS (Gmail, Outlook): a table layout 600 px wide at most,
every style inline, a system sans-serif font stack, the facts as a bordered table with zebra rows whose amounts are
right-aligned in tabular figures, and the dashboard link as a "bulletproof" button (a styled link in a table cell,
so it stays a button where padding on links is ignored). Every value is HTML-escaped. Transport: RFC 3207
STARTTLS (``tls="starttls"``, the default) or implicit TLS (``tls="implicit"``, RFC 8314 port 465); credentials
are only ever sent on an encrypted connection: a server that does not offer STARTTLS gets none and the attempt
is refused. ``tls="none"`` exists for a local relay without authentication and refuses credentials.

A message with a :class:`alerts.message.Document` (a monthly statement) carries that document's own text and HTML
instead, and its attachments after them (``multipart/mixed``); :func:`html_page` is the page both HTML forms share.
"""

from __future__ import annotations

import html
import re
import smtplib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from alerts.message import Message
from alerts.webhooks import Attempt

TRANSIENT_SMTP_CODES = range(400, 500)
FONT = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
"""System sans-serif fonts: each client's own UI font, Arial where none of them is installed."""
SEVERITY_COLOURS = {"critical": "#cf222e", "warning": "#bf8700", "info": "#0969da"}
"""The colour of the bar above a message, by severity (unknown severities: the warning colour)."""
BUTTON_COLOUR = "#0969da"
BORDER = "1px solid #d0d7de"
ZEBRA = ("#ffffff", "#f6f8fa")
_NUMBER = re.compile(r"[+-]?\d[\d,]*(?:\.\d+)?(?: ?[^\d\s]+)?")


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


def html_cell(text: str, style: str, tag: str = "td", **attributes: str) -> str:
    """``<td>`` (or ``tag``) holding ``text`` escaped, with an inline ``style`` and escaped attributes."""
    extra = "".join(f' {name}="{html.escape(value, quote=True)}"' for name, value in attributes.items())
    return f'<{tag}{extra} style="{style}">{html.escape(text)}</{tag}>'


def is_amount(value: str) -> bool:
    """Whether a field's value is an amount, right-aligned: one number with a unit, decimals or thousands
    separators (``1,234.50 USD``, ``85.0 %``, ``12.5``, ``70 °C``). A bare integer is an identifier (a job id, a GPU
    index) and, like dates (``2026-11``), durations (``1 h 30 min``) and text, is not."""
    return _NUMBER.fullmatch(value) is not None and not value.lstrip("+-").isdigit()


def fact_rows(fields: list[tuple[str, str]]) -> str:
    """One zebra row per field: the name as a row header, the value (right-aligned when :func:`is_amount`)."""
    cell = f"font-family:{FONT};color:#1f2328;font-size:14px;line-height:20px;padding:8px 12px;border:{BORDER};"
    rows = []
    for number, (name, value) in enumerate(fields):
        header = html_cell(name, f"{cell}text-align:left;font-weight:600;", "th", scope="row")
        if is_amount(value):
            amount = f"{cell}text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap;"
            data = html_cell(value, amount, align="right")
        else:
            data = html_cell(value, f"{cell}text-align:left;", align="left")
        rows.append(f'<tr style="background-color:{ZEBRA[number % 2]};">{header}{data}</tr>')
    return "".join(rows)


def html_button(label: str, url: str) -> str:
    """A bulletproof button: the link styled as one, inside a table cell of the button's colour."""
    link_style = (
        f"display:inline-block;padding:10px 20px;font-family:{FONT};font-size:15px;line-height:20px;"
        "font-weight:600;color:#ffffff;text-decoration:none;border-radius:6px;"
    )
    return (
        '<table role="presentation" cellpadding="0" cellspacing="0"><tr>'
        f'<td align="center" bgcolor="{BUTTON_COLOUR}" style="border-radius:6px;background-color:{BUTTON_COLOUR};">'
        f'<a href="{html.escape(url, quote=True)}" target="_blank" style="{link_style}">{html.escape(label)}</a>'
        "</td></tr></table>"
    )


def html_body(message: Message) -> str:
    """The HTML part of ``message`` (module docstring): under a bar of its severity's colour, the title, the
    summary, the fields as a table (:func:`fact_rows`) and a button to ``message.link``, if any; a footer."""
    text = f"font-family:{FONT};color:#1f2328;"
    rows = [
        html_cell(message.title, f"{text}padding:20px 24px 8px 24px;font-size:20px;line-height:28px;font-weight:600;"),
        html_cell(message.summary, f"{text}padding:0 24px 20px 24px;font-size:15px;line-height:22px;"),
    ]
    if message.fields:
        rows.append(
            '<td style="padding:0 24px 20px 24px;"><table width="100%" cellpadding="0" cellspacing="0" '
            f'style="width:100%;border-collapse:collapse;border:{BORDER};">{fact_rows(message.fields)}</table></td>'
        )
    if message.link is not None:
        rows.append(f'<td style="padding:0 24px 24px 24px;">{html_button(*message.link)}</td>')
    colour = SEVERITY_COLOURS.get(message.severity, SEVERITY_COLOURS["warning"])
    return html_page(message.title, rows, colour, f"Sent by gpu-finops, severity {message.severity}.")


def html_page(title: str, rows: Sequence[str], colour: str, footer: str, margin_px: int = 24) -> str:
    """A whole HTML e-mail: on a grey background, a white card 600 px wide at most (the screen's width on a phone)
    under a 4 px bar of ``colour``, each of ``rows`` one ``<td>…</td>`` row of it, then ``footer`` (text) in small
    grey type, ``margin_px`` from the card's sides as the rows' own padding should be; ``title`` is the document's
    ``<title>``."""
    footer_style = (
        f"font-family:{FONT};color:#656d76;font-size:12px;line-height:16px;padding:12px {margin_px}px;"
        f"border-top:{BORDER};"
    )
    card = f"width:100%;max-width:600px;background-color:#ffffff;border:{BORDER};border-top:4px solid {colour};"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title></head>"
        f'<body style="margin:0;padding:0;background-color:#f3f4f6;font-family:{FONT};">'
        '<table role="presentation" width="100%" cellpadding="0" cellspacing="0" '
        f'style="background-color:#f3f4f6;font-family:{FONT};">'
        '<tr><td align="center" style="padding:24px 0;">'
        f'<table role="presentation" width="600" cellpadding="0" cellspacing="0" style="{card}">'
        + "".join(f"<tr>{row}</tr>" for row in [*rows, html_cell(footer, footer_style)])
        + "</table></td></tr></table></body></html>"
    )


def build_email(message: Message, sender: str, recipients: list[str]) -> EmailMessage:
    """The RFC 5322 message: subject = title, a plain-text part (:meth:`Message.plain_text`) and its HTML
    alternative (:func:`html_body`, or the message's document's own); a document's attachments after them
    (``multipart/mixed`` around the ``multipart/alternative``)."""
    email = EmailMessage()
    email["From"] = sender
    email["To"] = ", ".join(recipients)
    email["Subject"] = message.title
    email["Date"] = formatdate(usegmt=True)
    email["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    email.set_content(message.plain_text())
    document = message.document
    email.add_alternative(html_body(message) if document is None else document.html, subtype="html")
    for attachment in document.attachments if document is not None else ():
        maintype, _, subtype = attachment.content_type.partition("/")
        if maintype != "text":
            raise ValueError(f"attachment {attachment.filename}: only text attachments, not {attachment.content_type}")
        email.add_attachment(attachment.content, subtype=subtype, filename=attachment.filename)
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
