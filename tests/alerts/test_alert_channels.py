"""Alert channels over real sockets: a local HTTP server as the Slack webhook, aiosmtpd with STARTTLS."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest
from aiosmtpd.controller import Controller

from alerts.mail import SmtpSettings, html_body, is_amount, send_email
from alerts.message import Message
from alerts.slack import FIELDS_PER_SECTION, HEADER_LIMIT, post_to_slack, slack_payload
from alerts.webhooks import WebhookPolicy, WebhookRefused, redact
from tests.support.alert_servers import SECRET_PATH, Mailbox, Webhook, starttls_smtp
from tests.support.certificates import Certificates
from tests.support.servers import free_port

MESSAGE = Message(
    title="[FIRING] Idle GPUs: job 4242 <vision>",
    summary="8 GPUs of job 4242 have been idle for 45 min.",
    fields=[("Team", "vision"), ("Job", "4242"), ("GPUs", "8"), ("Cost so far", "41.28 USD")],
    link=("Open in gpu-finops", "http://dashboard.example/idle?job=4242"),
)
LOCAL = WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"}), allow_private_addresses=True)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


def test_slack_payload_has_header_fields_button_and_fallback() -> None:
    payload = slack_payload(MESSAGE)
    header, summary, facts, actions = payload["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "text": MESSAGE.title}}
    assert summary["text"]["text"] == MESSAGE.summary
    assert [f["text"] for f in facts["fields"]] == ["*Team*\nvision", "*Job*\n4242", "*GPUs*\n8",
                                                    "*Cost so far*\n41.28 USD"]  # fmt: skip
    assert actions["elements"][0]["url"] == "http://dashboard.example/idle?job=4242"
    assert "Cost so far: 41.28 USD" in payload["text"]


def test_slack_payload_stays_within_block_kit_limits() -> None:
    long = Message(title="x" * 500, summary="<&>" * 2000, fields=[(f"f{i}", "v" * 3000) for i in range(23)])
    blocks = slack_payload(long)["blocks"]
    assert len(blocks[0]["text"]["text"]) == HEADER_LIMIT
    assert len(blocks[1]["text"]["text"]) <= 3000 and blocks[1]["text"]["text"].startswith("&lt;&amp;&gt;")
    sections = [b for b in blocks if "fields" in b]
    assert [len(s["fields"]) for s in sections] == [FIELDS_PER_SECTION, FIELDS_PER_SECTION, 3]
    assert all(len(f["text"]) <= 2000 for s in sections for f in s["fields"])


def test_webhook_delivery_retry_refusal_and_retry_after(client: httpx.Client) -> None:
    webhook = Webhook((500, {}), (429, {"Retry-After": "2"}), (400, {}))
    try:
        first, second, third, fourth = (post_to_slack(client, webhook.url, MESSAGE, LOCAL) for _ in range(4))
    finally:
        webhook.close()
    assert (first.outcome, first.retry_after) == ("failed", None)
    assert (second.outcome, second.retry_after) == ("failed", 2.0)
    assert third.outcome == "refused"
    assert fourth.outcome == "delivered"
    assert len(webhook.received) == 4 and webhook.received[3] == slack_payload(MESSAGE)
    assert all(SECRET_PATH not in a.reason and "s3cr3t" not in a.reason for a in (first, second, third))


def test_webhook_policy_refuses_unlisted_private_and_plain_http_destinations() -> None:
    public = WebhookPolicy(resolver=lambda host: ["34.1.2.3"])
    public.check("https://hooks.slack.com/services/T/B/x")
    with pytest.raises(WebhookRefused, match="allow-list"):
        public.check("https://evil.example/services/T/B/x")
    with pytest.raises(WebhookRefused, match="https"):
        public.check("http://hooks.slack.com/services/T/B/x")
    metadata = WebhookPolicy(allowed_hosts=frozenset({"hooks.slack.com"}), resolver=lambda host: ["169.254.169.254"])
    with pytest.raises(WebhookRefused, match=r"non-public address 169\.254\.169\.254"):
        metadata.check("https://hooks.slack.com/services/T/B/x")
    with pytest.raises(WebhookRefused, match="non-public"):
        WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"})).check("http://127.0.0.1:9/hook")
    assert redact("https://user:pw@hooks.slack.com/services/T/B/secret?x=1") == "https://hooks.slack.com/…"


@pytest.fixture(scope="module")
def certificates() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context) from a throwaway CA made for this test run."""
    made = Certificates()
    return made.server, made.client


def _starttls_smtp(mailbox: Mailbox, tls_context: ssl.SSLContext) -> Controller:
    return starttls_smtp(mailbox, tls_context)


def test_email_over_starttls_with_text_and_html(certificates: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_context, client_context = certificates
    mailbox = Mailbox()
    controller = _starttls_smtp(mailbox, server_context)
    settings = SmtpSettings("127.0.0.1", controller.port, "gpu-finops@example.org", username="alerts",
                            password="mail-secret", ssl_context=client_context)  # fmt: skip
    try:
        attempt = send_email(settings, MESSAGE, ["owner@example.org", "lead@example.org"])
    finally:
        controller.stop()
    assert attempt.outcome == "delivered", attempt.reason
    assert mailbox.logins == [(b"alerts", b"mail-secret")]
    (email,) = mailbox.messages
    assert email["Subject"] == MESSAGE.title
    assert email["To"] == "owner@example.org, lead@example.org"
    assert email["Date"].datetime.tzinfo is not None
    assert email["Message-ID"].endswith("@example.org>")
    text = email.get_body(("plain",))
    html = email.get_body(("html",))
    assert text is not None and "Cost so far: 41.28 USD" in text.get_content()
    assert html is not None and "&lt;vision&gt;" in html.get_content()


def test_email_html_escapes_every_value_and_right_aligns_only_amounts() -> None:
    amounts = ["41.28 USD", "1,234.50 USD", "85.0 %", "12.5", "-3.2", "70 °C", "650 W"]
    others = ["4242", "2026-11", "2026-11-24 08:00 UTC (1 h 30 min)", "8 (gpu-a-01: 0, 1)", "unpriced", "yes", ""]
    assert [is_amount(v) for v in amounts] == [True] * len(amounts)
    assert [is_amount(v) for v in others] == [False] * len(others)
    hostile = Message(
        title="[FIRING] <b>x</b>",
        summary="a & b",
        fields=[("<th>", "<script>alert(1)</script>")],
        link=("Open <now>", 'http://dash/x?a=1&b="2"'),
    )
    body = html_body(hostile)
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "&lt;b&gt;x&lt;/b&gt;" in body and "a &amp; b" in body and "Open &lt;now&gt;" in body
    assert 'href="http://dash/x?a=1&amp;b=&quot;2&quot;"' in body
    assert "<style" not in body and "<a " not in html_body(Message("t", "s")), "no button without a link"


def test_a_server_without_starttls_gets_no_credentials() -> None:
    mailbox = Mailbox()
    controller = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings = SmtpSettings("127.0.0.1", controller.port, "gpu-finops@example.org", username="alerts",
                            password="mail-secret")  # fmt: skip
    try:
        attempt = send_email(settings, MESSAGE, ["owner@example.org"])
    finally:
        controller.stop()
    assert attempt.outcome == "refused" and "STARTTLS" in attempt.reason
    assert "mail-secret" not in attempt.reason
    assert mailbox.logins == [] and mailbox.messages == []
