"""The delivery worker over real sockets, both databases: a local HTTP server as the Slack webhook (retries on
5xx, refusal on 400, Retry-After on 429, deadline, retry by hand, two workers), aiosmtpd with STARTTLS, and
logs and stored errors free of every secret."""

from __future__ import annotations

import logging
import random
import threading
from datetime import datetime, timedelta

import pytest
from pydantic import SecretStr
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import RouteConfig
from alerts.delivery import LEASE, Backoff, Channels, DeliveryWorker, idempotency_key, send
from alerts.engine import enqueue
from alerts.mail import SmtpSettings
from alerts.message import Message
from alerts.models import AlertDelivery
from alerts.render import message_to_payload
from alerts.service import AlertRunner, AlertService
from alerts.slack import slack_payload
from alerts.store import list_deliveries, retry_deliveries
from alerts.webhooks import WebhookPolicy
from finops.timeutil import utc_now
from tests.support.alert_servers import SECRET_PATH, Mailbox, Webhook, starttls_smtp
from tests.support.certificates import Certificates
from tests.support.servers import free_port

LOCAL = WebhookPolicy(allowed_hosts=frozenset({"127.0.0.1"}), allow_private_addresses=True)
MESSAGE = Message(
    title="[FIRING] Idle GPUs: job 4242, team vision",
    summary="8 GPUs of job 4242 (user alice, team vision) have been idle for 45 min, costing 41.28 USD so far.",
    fields=[("Team", "vision"), ("Job", "4242"), ("GPUs", "8"), ("Cost so far", "41.28 USD")],
    link=("Open in gpu-finops", "http://127.0.0.1:8501/idle"),
)
HOUR = timedelta(hours=1)


class Clock:
    """A settable clock for the worker: attempts happen at exactly the instants a test chooses."""

    def __init__(self, now: datetime) -> None:
        self.now = now.replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now


def _queue(
    sessions: sessionmaker[Session], at: datetime, route: RouteConfig, deadline: timedelta = HOUR, count: int = 1
) -> list[int]:
    ids = []
    with sessions.begin() as session:
        for n in range(count):
            message = MESSAGE if count == 1 else Message(f"message {n}", "s")
            ids += enqueue(session, route, message_to_payload(message), None, at, deadline)
    return ids


def _row(sessions: sessionmaker[Session], delivery_id: int) -> AlertDelivery:
    with sessions() as session:
        row = session.get(AlertDelivery, delivery_id)
        assert row is not None
        return row


def _worker(sessions: sessionmaker[Session], clock: Clock, channels: Channels) -> DeliveryWorker:
    return DeliveryWorker(sessions, channels, clock=clock, rng=random.Random(7), backoff=Backoff(1.0, 60.0))


@pytest.fixture
def secrets_logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def _no_secret_in(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert text, "something was logged"
    for secret in secrets:
        assert secret not in text


def test_three_server_errors_then_success_deliver_exactly_one_message(sessions, secrets_logged) -> None:  # type: ignore[no-untyped-def]
    webhook = Webhook((500, {}), (500, {}), (500, {}))
    clock = Clock(utc_now())
    worker = _worker(sessions, clock, Channels({"vision": SecretStr(webhook.url)}, LOCAL))
    try:
        (delivery,) = _queue(sessions, clock.now, RouteConfig(slack=["vision"]))
        statuses = []
        for _ in range(10):
            outcomes = worker.run_once()
            statuses += [o.status for o in outcomes]
            row = _row(sessions, delivery)
            if row.status != "pending":
                break
            ceiling = min(60.0, 2 ** (row.attempts - 1))
            assert row.last_attempt_at is not None
            assert timedelta(0) <= row.next_attempt_at - row.last_attempt_at <= timedelta(seconds=ceiling)
            assert "HTTP 500" in (row.last_error or "") and "s3cr3t" not in (row.last_error or "")
            clock.now = row.next_attempt_at + timedelta(seconds=1)
    finally:
        worker.close()
        webhook.close()
    assert statuses == ["retry", "retry", "retry", "delivered"]
    assert webhook.answered == [500, 500, 500, 200]
    assert len(set(webhook.keys)) == 1 and webhook.keys[0] is not None, "one idempotency key for every attempt"
    assert webhook.delivered == [slack_payload(MESSAGE)], "exactly one message reached the channel"
    row = _row(sessions, delivery)
    assert (row.status, row.attempts, row.last_error) == ("delivered", 4, None)
    _no_secret_in(secrets_logged, webhook.url, SECRET_PATH, "s3cr3t-token")


def test_a_400_is_refused_recorded_and_not_retried(sessions, secrets_logged) -> None:  # type: ignore[no-untyped-def]
    webhook = Webhook((400, {}))
    clock = Clock(utc_now())
    worker = _worker(sessions, clock, Channels({"vision": SecretStr(webhook.url)}, LOCAL))
    try:
        (delivery,) = _queue(sessions, clock.now, RouteConfig(slack=["vision"]))
        (outcome,) = worker.run_once()
        clock.now += 2 * HOUR
        assert worker.run_once() == [], "a refused delivery is not tried again"
    finally:
        worker.close()
        webhook.close()
    assert outcome.status == "refused" and "HTTP 400 invalid_payload" in outcome.reason
    row = _row(sessions, delivery)
    assert (row.status, row.attempts) == ("refused", 1)
    assert row.last_error is not None and row.last_error.startswith("http://127.0.0.1:")
    assert "s3cr3t" not in row.last_error and len(webhook.received) == 1
    with sessions() as session:
        assert [d.id for d in list_deliveries(session)] == [delivery], "failed and refused are listed"
    _no_secret_in(secrets_logged, webhook.url, SECRET_PATH)


def test_429_with_retry_after_waits_the_seconds_asked(sessions) -> None:  # type: ignore[no-untyped-def]
    webhook = Webhook((429, {"Retry-After": "2"}))
    clock = Clock(utc_now())
    worker = _worker(sessions, clock, Channels({"vision": SecretStr(webhook.url)}, LOCAL))
    try:
        (delivery,) = _queue(sessions, clock.now, RouteConfig(slack=["vision"]))
        (first,) = worker.run_once()
        row = _row(sessions, delivery)
        assert first.status == "retry" and row.last_attempt_at == clock.now
        assert row.next_attempt_at - row.last_attempt_at == timedelta(seconds=2), "Retry-After: 2 honoured"
        clock.now += timedelta(seconds=1)
        assert worker.run_once() == [], "not before the 2 s"
        clock.now += timedelta(seconds=1)
        (second,) = worker.run_once()
    finally:
        worker.close()
        webhook.close()
    assert second.status == "delivered" and len(webhook.delivered) == 1


def test_a_deadline_ends_retries_and_a_retry_by_hand_delivers(sessions) -> None:  # type: ignore[no-untyped-def]
    webhook = Webhook(*[(503, {})] * 40)
    clock = Clock(utc_now())
    worker = _worker(sessions, clock, Channels({"vision": SecretStr(webhook.url)}, LOCAL))
    try:
        (delivery,) = _queue(sessions, clock.now, RouteConfig(slack=["vision"]), deadline=timedelta(seconds=30))
        for _ in range(40):
            worker.run_once()
            row = _row(sessions, delivery)
            if row.status != "pending":
                break
            clock.now = max(clock.now, row.next_attempt_at)
        assert row.status == "failed" and "HTTP 503" in (row.last_error or "")
        assert row.last_attempt_at is not None and row.last_attempt_at <= row.deadline
        tried = len(webhook.received)
        webhook.replies.clear()
        clock.now += HOUR
        assert worker.run_once() == [], "a failed delivery waits for a person"
        with sessions.begin() as session:
            assert retry_deliveries(session, clock.now, HOUR, [delivery, 999_999], actor="system:test") == [delivery]
        (outcome,) = worker.run_once()
    finally:
        worker.close()
        webhook.close()
    assert outcome.status == "delivered" and len(webhook.received) == tried + 1
    assert _row(sessions, delivery).deadline == clock.now + HOUR


def test_network_errors_and_unknown_or_refused_destinations(sessions) -> None:  # type: ignore[no-untyped-def]
    closed = f"http://127.0.0.1:{free_port()}{SECRET_PATH}"
    clock = Clock(utc_now())
    hooks = {"down": SecretStr(closed), "elsewhere": SecretStr(f"https://evil.example{SECRET_PATH}")}
    worker = _worker(sessions, clock, Channels(hooks, LOCAL))
    try:
        ids = _queue(sessions, clock.now, RouteConfig(slack=["down", "elsewhere", "nobody"], email=["a@example.org"]))
        outcomes = {o.id: o for o in worker.run_once()}
    finally:
        worker.close()
    down, elsewhere, nobody, mail = (outcomes[i] for i in ids)
    assert down.status == "retry" and "network error ConnectError" in down.reason
    assert elsewhere.status == "refused" and "not in the webhook allow-list" in elsewhere.reason
    assert nobody.status == "refused" and "no Slack webhook named 'nobody'" in nobody.reason
    assert mail.status == "refused" and "no SMTP server is configured" in mail.reason
    assert all("s3cr3t" not in o.reason for o in outcomes.values())


def test_two_workers_send_each_message_once(sessions) -> None:  # type: ignore[no-untyped-def]
    webhook = Webhook()
    clock = Clock(utc_now())
    channels = Channels({"vision": SecretStr(webhook.url)}, LOCAL)
    ids = _queue(sessions, clock.now, RouteConfig(slack=["vision"]), count=30)
    workers = [_worker(sessions, clock, channels) for _ in range(2)]
    start = threading.Barrier(2)
    sent: list[list[int]] = [[], []]

    def run(index: int) -> None:
        start.wait()
        while outcomes := workers[index].run_once(limit=3):
            sent[index] += [o.id for o in outcomes]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for worker in workers:
            worker.close()
        webhook.close()
    assert sorted(sent[0] + sent[1]) == ids, "every message sent by exactly one worker"
    assert sorted(body["text"].split("\n")[0] for body in webhook.delivered) == sorted(
        f"message {n}" for n in range(30)
    )
    with sessions() as session:
        assert set(session.scalars(select(AlertDelivery.status))) == {"delivered"}


def test_a_send_whose_outcome_was_lost_is_sent_again_with_the_same_idempotency_key(sessions) -> None:  # type: ignore[no-untyped-def]
    webhook = Webhook()
    clock = Clock(utc_now())
    channels = Channels({"vision": SecretStr(webhook.url)}, LOCAL)
    first, second = _queue(sessions, clock.now, RouteConfig(slack=["vision"]), count=2)
    dying, successor = _worker(sessions, clock, channels), _worker(sessions, clock, channels)
    try:
        # The first worker claims both rows and sends one, then dies before recording it.
        claimed = dying.claim()
        row = next(r for r in claimed if r["id"] == first)
        key = idempotency_key(row["id"], row["created_at"])
        assert send(channels, dying.client, row["channel"], row["target"], row["payload"], key).outcome == "delivered"
        assert successor.run_once() == [], "claimed rows are not due again while their claim lasts"
        clock.now += LEASE
        assert sorted(o.id for o in successor.run_once()) == [first, second]
    finally:
        dying.close()
        successor.close()
        webhook.close()
    assert len(webhook.delivered) == 3, "at least once: the row whose outcome was lost is sent again"
    assert webhook.keys.count(key) == 2 and len(set(webhook.keys)) == 2, "with the key it was first sent with"
    assert len({k for k, status in zip(webhook.keys, webhook.answered, strict=True) if status == 200}) == 2


@pytest.fixture(scope="module")
def certificates() -> Certificates:
    return Certificates()


def test_email_over_starttls_through_the_outbox(sessions, certificates, secrets_logged) -> None:  # type: ignore[no-untyped-def]
    mailbox = Mailbox()
    controller = starttls_smtp(mailbox, certificates.server)
    smtp = SmtpSettings("127.0.0.1", controller.port, "gpu-finops@example.org", username="alerts",
                        password="mail-secret", ssl_context=certificates.client)  # fmt: skip
    clock = Clock(utc_now())
    worker = _worker(sessions, clock, Channels(smtp=smtp))
    try:
        (delivery,) = _queue(sessions, clock.now, RouteConfig(email=["lead@example.org", "ops@example.org"]))
        (outcome,) = worker.run_once()
    finally:
        worker.close()
        controller.stop()
    assert outcome.status == "delivered", outcome.reason
    assert mailbox.logins == [(b"alerts", b"mail-secret")]
    (email,) = mailbox.messages
    assert email["Subject"] == MESSAGE.title and email["To"] == "lead@example.org, ops@example.org"
    assert email["Message-ID"].endswith("@example.org>") and email["Date"].datetime.tzinfo is not None
    text = email.get_body(("plain",))
    assert text is not None and "Cost so far: 41.28 USD" in text.get_content()
    assert _row(sessions, delivery).status == "delivered"
    _no_secret_in(secrets_logged, "mail-secret")


def test_a_server_without_starttls_gets_no_credentials_and_the_delivery_is_refused(sessions, secrets_logged) -> None:  # type: ignore[no-untyped-def]
    from aiosmtpd.controller import Controller

    mailbox = Mailbox()
    controller = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    smtp = SmtpSettings("127.0.0.1", controller.port, "gpu-finops@example.org", username="alerts",
                        password="mail-secret")  # fmt: skip
    clock = Clock(utc_now())
    worker = _worker(sessions, clock, Channels(smtp=smtp))
    try:
        (delivery,) = _queue(sessions, clock.now, RouteConfig(email=["lead@example.org"]))
        (outcome,) = worker.run_once()
    finally:
        worker.close()
        controller.stop()
    assert outcome.status == "refused" and "does not offer STARTTLS" in outcome.reason
    assert mailbox.logins == [] and mailbox.messages == []
    row = _row(sessions, delivery)
    assert row.status == "refused" and "mail-secret" not in (row.last_error or "")
    _no_secret_in(secrets_logged, "mail-secret")


def test_the_outbox_keeps_finished_messages_for_its_retention_and_pending_ones_for_ever(sessions) -> None:  # type: ignore[no-untyped-def]
    now = utc_now().replace(microsecond=0)
    old, recent = now - timedelta(days=40), now - timedelta(days=10)
    queued = {
        (status, at): _queue(sessions, at, RouteConfig(slack=["vision"]))[0]
        for status in ("delivered", "failed", "refused", "pending")
        for at in (old, recent)
    }
    with sessions.begin() as session:
        for (status, _), delivery in queued.items():
            session.execute(update(AlertDelivery).where(AlertDelivery.id == delivery).values(status=status))
    runner = AlertRunner(AlertService(outbox_retention=timedelta(days=30)), sessions, clock=lambda: now)
    assert runner.prune_outbox() == 3, "delivered, failed and refused rows older than 30 days"
    with sessions() as session:
        left = set(session.scalars(select(AlertDelivery.id)))
    assert left == {queued[s, recent] for s in ("delivered", "failed", "refused", "pending")} | {
        queued["pending", old]
    }, "recent rows and a pending one however old stay"
    assert runner.prune_outbox() == 0
