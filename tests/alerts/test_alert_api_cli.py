"""``/api/v1/alerts`` over a real socket and ``gpu-finops alerts …`` through typer's CliRunner, both databases:
alerts, silences (create, list, expire), failed deliveries (list, retry), test messages to Slack and e-mail."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import select
from typer.testing import CliRunner, Result

from alerts.config import AlertConfig, RouteConfig
from alerts.engine import RuleInputs, enqueue, evaluate
from alerts.message import Message
from alerts.models import AlertDelivery, AlertSilence
from alerts.render import message_to_payload
from finops.cli import app
from finops.timeutil import utc_now
from finops.web.app import create_app
from tests.support.alert_cluster import Cluster, minute_floor
from tests.support.alert_servers import SECRET_PATH, Mailbox, Webhook, starttls_smtp
from tests.support.certificates import Certificates
from tests.support.servers import running

TOKEN = "alerts-api-token"


def _silent_node(sessions) -> None:  # type: ignore[no-untyped-def]
    now = minute_floor(utc_now())
    Cluster(sessions).readings("gpu-s-01", [0], now - timedelta(minutes=10), now - timedelta(minutes=5))
    with sessions.begin() as session:
        evaluate(session, AlertConfig(), RuleInputs(), utc_now())


def _delivery(sessions, status: str) -> int:  # type: ignore[no-untyped-def]
    now = utc_now()
    with sessions.begin() as session:
        (delivery,) = enqueue(session, RouteConfig(slack=["ops"]), message_to_payload(Message("t", "s")), None, now,
                              timedelta(hours=1))  # fmt: skip
        row = session.get(AlertDelivery, delivery)
        assert row is not None
        row.status, row.attempts, row.last_error = status, 3, "http://hooks.example/…: HTTP 404 no_service"
    return delivery


def test_alerts_silences_and_deliveries_over_the_api(sessions) -> None:  # type: ignore[no-untyped-def]
    _silent_node(sessions)
    refused, delivered = _delivery(sessions, "refused"), _delivery(sessions, "delivered")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as url, httpx.Client(base_url=url) as client:
        assert client.get("/api/v1/alerts").status_code == 401
        (alert,) = client.get("/api/v1/alerts", headers=headers).json()
        assert (alert["rule"], alert["labels"]["node"], alert["muted"]) == ("collector-silent", "gpu-s-01", False)
        until = (utc_now() + timedelta(hours=2)).isoformat()
        bad = client.post("/api/v1/alerts/silences", headers=headers, json={"matchers": ["node=~("], "ends_at": until})
        assert bad.status_code == 422 and "invalid regular expression" in bad.json()["detail"]
        late = client.post("/api/v1/alerts/silences", headers=headers, json={"matchers": ["a=b"], "ends_at": "soon"})
        assert late.status_code == 422 and "ends_at" in late.json()["detail"]
        made = client.post(
            "/api/v1/alerts/silences",
            headers=headers,
            json={"matchers": ['node="gpu-s-01"'], "ends_at": until, "comment": "rack move", "created_by": "ops"},
        )
        assert made.status_code == 201
        silence_id = made.json()["id"]
        (listed,) = client.get("/api/v1/alerts/silences", headers=headers).json()
        assert listed["matchers"] == ['node="gpu-s-01"'] and listed["active"] and listed["comment"] == "rack move"
        assert client.get("/api/v1/alerts", headers=headers).json()[0]["muted"] is True
        assert client.delete(f"/api/v1/alerts/silences/{silence_id}", headers=headers).status_code == 204
        assert client.delete(f"/api/v1/alerts/silences/{silence_id}", headers=headers).status_code == 404
        assert client.get("/api/v1/alerts/silences", headers=headers).json() == []
        assert len(client.get("/api/v1/alerts/silences?include_expired=true", headers=headers).json()) == 1

        failed = client.get("/api/v1/alerts/deliveries", headers=headers).json()
        assert [(d["id"], d["status"], d["attempts"]) for d in failed] == [(refused, "refused", 3)]
        assert failed[0]["last_error"].endswith("HTTP 404 no_service")
        assert client.get("/api/v1/alerts/deliveries?status=sent", headers=headers).status_code == 422
        assert client.post(f"/api/v1/alerts/deliveries/{delivered}/retry", headers=headers).status_code == 409
        assert client.post("/api/v1/alerts/deliveries/999999/retry", headers=headers).status_code == 404
        retried = client.post(f"/api/v1/alerts/deliveries/{refused}/retry", headers=headers)
        assert retried.json() == {"retried": [refused]}
        pending = client.get("/api/v1/alerts/deliveries?status=pending", headers=headers).json()
        assert [d["id"] for d in pending] == [refused]
        assert client.post("/api/v1/alerts/deliveries/retry", headers=headers).json() == {"retried": []}
        paths = client.get("/openapi.json", headers=headers).json()["paths"]
        assert {"/api/v1/alerts", "/api/v1/alerts/silences", "/api/v1/alerts/deliveries"} <= set(paths)


def _invoke(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, ["alerts", *args], env=env)


def _words(result: Result) -> str:
    return " ".join(result.output.replace("│", " ").split())


def test_alert_commands(sessions, database_url: str) -> None:  # type: ignore[no-untyped-def]
    env = {"FINOPS_DATABASE_URL": database_url}
    assert _invoke(env, "list").output.strip() == "no firing alerts"
    _silent_node(sessions)
    listing = _invoke(env, "list")
    assert listing.exit_code == 0 and "firing   critical collector-silent" in listing.output
    assert 'node="gpu-s-01"' in listing.output and "No GPU reading from gpu-s-01" in listing.output

    until = (utc_now() + timedelta(hours=1)).replace(microsecond=0)
    made = _invoke(env, "silence", "--matcher", 'node="gpu-s-01"', "--until", until.isoformat(), "--comment", "move")
    assert made.exit_code == 0, made.output
    assert made.output.startswith("silence ") and f'node="gpu-s-01" until {until.isoformat()}' in made.output
    with sessions() as session:
        silence = session.scalars(select(AlertSilence)).one()
    assert silence.comment == "move" and silence.matchers == ['node="gpu-s-01"']
    assert "(muted)" in _invoke(env, "list").output
    silences = _invoke(env, "silences").output
    assert silences.split()[:2] == [str(silence.id), "active"] and "(" in silences and ": move)" in silences
    bad = _invoke(env, "silence", "--matcher", "team", "--until", until.isoformat(), "--comment", "x")
    assert bad.exit_code == 2 and "not a matcher" in _words(bad)
    assert _invoke(env, "expire", str(silence.id)).output.strip() == f"silence {silence.id} expired"
    assert _invoke(env, "expire", str(silence.id)).exit_code == 2
    assert "(muted)" not in _invoke(env, "list").output

    refused = _delivery(sessions, "refused")
    shown = _invoke(env, "deliveries")
    assert shown.exit_code == 0 and f"{refused:>6}  refused" in shown.output and "HTTP 404 no_service" in shown.output
    assert _invoke(env, "retry").exit_code == 2, "an id or --all-failed"
    assert _invoke(env, "retry", "--all-failed").output.strip() == f"queued again: {refused}"
    again = _invoke(env, "retry", str(refused))
    assert again.exit_code == 1 and f"not failed or refused: {refused}" in again.output


def test_test_messages_to_slack_and_email(tmp_path: Path, database_url: str, engine) -> None:  # type: ignore[no-untyped-def]
    webhook = Webhook()
    certificates = Certificates()
    mailbox = Mailbox()
    smtp = starttls_smtp(mailbox, certificates.server)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(certificates.ca_pem)
    secret = tmp_path / "smtp-password"
    secret.write_text("mail-secret\n")
    rules = tmp_path / "alerts.yaml"
    rules.write_text("default_route:\n  slack: [ops]\n  email: [gpu-ops@example.org]\n")
    env = {
        "FINOPS_DATABASE_URL": database_url,
        "FINOPS_ALERT_RULES": str(rules),
        "FINOPS_ALERT_SLACK_WEBHOOKS": json.dumps({"ops": webhook.url}),
        "FINOPS_ALERT_WEBHOOK_HOSTS": '["127.0.0.1"]',
        "FINOPS_ALERT_WEBHOOK_ALLOW_PRIVATE": "true",
        "FINOPS_ALERT_SMTP_HOST": "127.0.0.1",
        "FINOPS_ALERT_SMTP_PORT": str(smtp.port),
        "FINOPS_ALERT_SMTP_SENDER": "gpu-finops@example.org",
        "FINOPS_ALERT_SMTP_USERNAME": "alerts",
        "FINOPS_ALERT_SMTP_PASSWORD_FILE": str(secret),
        "FINOPS_ALERT_SMTP_CA_FILE": str(ca),
    }
    try:
        slack = _invoke(env, "test", "--channel", "slack")
        email = _invoke(env, "test", "--channel", "email")
        no_route = _invoke(env, "test", "--channel", "slack", "--route", "team=nlp")
    finally:
        webhook.close()
        smtp.stop()
    assert slack.exit_code == 0, slack.output
    assert slack.output.strip().endswith("(slack → ops): delivered")
    (body,) = webhook.delivered
    assert body["blocks"][0]["text"]["text"] == "[TEST] gpu-finops alert delivery"
    assert email.exit_code == 0, email.output
    (message,) = mailbox.messages
    assert message["Subject"] == "[TEST] gpu-finops alert delivery" and message["To"] == "gpu-ops@example.org"
    assert mailbox.logins == [(b"alerts", b"mail-secret")]
    assert no_route.exit_code == 2 and "no route named 'team=nlp' (routes: default)" in no_route.output
    for result in (slack, email, no_route):
        assert SECRET_PATH not in result.output and "mail-secret" not in result.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("rules:\n  idle-gpu: {severity: loud}\n")
    bad = _invoke({**env, "FINOPS_ALERT_RULES": str(broken)}, "test", "--channel", "slack")
    assert bad.exit_code == 2 and f"{broken}: rules.idle-gpu.severity" in bad.output
