"""Alerts into Alertmanager: the ``postableAlerts`` body, the answers (4xx refused, 5xx and 429 retried), the
credentials, the updates queued after an evaluation, and end to end against Debian's ``prometheus-alertmanager``
over real sockets on both databases: the alert is listed by its API with our labels, a silence made there mutes
it, its receiver is notified, and it resolves there when ours resolves."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from alerts.alertmanager import annotation_name, hold_for, post_alerts, postable_alert, queue_updates
from alerts.config import parse_config
from alerts.delivery import Channels, DeliveryWorker, send
from alerts.models import AlertDelivery, AlertInstance
from alerts.service import AlertRunner, AlertService
from finops.settings.alerts import AlertmanagerTarget
from finops.timeutil import utc_now
from tests.support.alert_cluster import Cluster, minute_floor
from tests.support.alert_rows import alert_row
from tests.support.alert_servers import Webhook
from tests.support.alertmanager_server import alertmanager, listed, wait_until
from tests.support.certificates import Certificates
from tests.support.environment import debian_binary
from tests.support.servers import free_port

NOW = datetime(2026, 3, 9, 12, 0, tzinfo=UTC)
HOLD = timedelta(minutes=20)


def _idle(start: datetime, end: datetime | None = None, team: str = "vision", job: str = "4242") -> AlertInstance:
    row = alert_row("idle-gpu", "warning", {"team": team, "job": job, "user": ""}, start, end, f"Idle GPUs: job {job}")
    row.annotations = {
        **row.annotations,
        "fields": [["Team", team], ["GPUs", "8"], ["Cost so far", "41.28 USD"], ["Summary", "not the summary"]],
        "page": "idle",
    }
    return row


def test_a_firing_alert_as_alertmanager_takes_it() -> None:
    alert = postable_alert(_idle(NOW - timedelta(hours=1)), NOW, HOLD, "https://finops.example/")
    assert alert == {
        "labels": {"alertname": "idle-gpu", "rule": "idle-gpu", "severity": "warning", "team": "vision", "job": "4242"},
        "annotations": {
            "title": "Idle GPUs: job 4242",
            "summary": "Idle GPUs: job 4242.",
            "team": "vision",
            "gpus": "8",
            "cost_so_far": "41.28 USD",
        },
        "startsAt": "2026-03-09T11:00:00.000Z",
        "endsAt": "2026-03-09T12:20:00.000Z",
        "generatorURL": "https://finops.example/idle",
    }


def test_resolved_and_event_alerts_end_when_they_end_and_no_dashboard_means_no_link() -> None:
    resolved = postable_alert(_idle(NOW - timedelta(hours=1), NOW - timedelta(minutes=3)), NOW, HOLD, "")
    assert resolved["endsAt"] == "2026-03-09T11:57:00.000Z" and "generatorURL" not in resolved
    month_end = NOW + timedelta(minutes=5)
    budget = alert_row("budget-80", "warning", {"team": "vision"}, NOW - timedelta(hours=2), None, "Budget 80 %")
    budget.ends_at = month_end  # an event alert knows its end while it fires
    assert postable_alert(budget, NOW, HOLD, "")["endsAt"] == "2026-03-09T12:05:00.000Z"
    assert postable_alert(budget, NOW - timedelta(hours=1), HOLD, "")["endsAt"] == "2026-03-09T11:20:00.000Z"


def test_names_and_hold() -> None:
    assert [annotation_name(n) for n in ("Cost so far", "GPUs", "8 GPUs", "Used (%)", "—")] == [
        "cost_so_far",
        "gpus",
        "_8_gpus",
        "used",
        "field",
    ]
    assert hold_for(timedelta(minutes=5)) == timedelta(minutes=20)
    assert hold_for(timedelta(seconds=1)) == timedelta(minutes=4)  # Prometheus' 1 min resend delay at least


def test_4xx_is_refused_5xx_and_429_are_retried_over_a_real_socket() -> None:
    server = Webhook((503, {}), (429, {"Retry-After": "3"}), (400, {}))
    target = AlertmanagerTarget(url=server.url.removesuffix("/services/T000/B000/s3cr3t-token") + "/prefix/")
    alerts = [postable_alert(_idle(NOW), NOW, HOLD, "")]
    try:
        with httpx.Client(timeout=10) as client:
            answers = [post_alerts(client, target, alerts) for _ in range(4)]
    finally:
        server.close()
    assert [(a.outcome, a.retry_after) for a in answers] == [
        ("failed", None),
        ("failed", 3.0),
        ("refused", None),
        ("delivered", None),
    ]
    assert server.received == [alerts] * 4
    unreachable = AlertmanagerTarget(url=f"http://127.0.0.1:{free_port()}")
    with httpx.Client(timeout=10) as client:
        down = post_alerts(client, unreachable, alerts)
    assert down.outcome == "failed" and "network error" in down.reason


def test_credentials_are_read_from_their_files_at_each_request(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    client = httpx.Client(transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(200)))
    token, password = tmp_path / "token", tmp_path / "password"
    token.write_text("t0ken-1\n")
    password.write_text("pa55")
    bearer = AlertmanagerTarget(url="https://am.example:9093/am", bearer_token_file=token)
    basic = AlertmanagerTarget(url="https://am.example", username="finops", password_file=password)
    assert post_alerts(client, bearer, []).outcome == "delivered"
    token.write_text("t0ken-2")  # rotated
    assert post_alerts(client, bearer, []).outcome == "delivered"
    assert post_alerts(client, basic, []).outcome == "delivered"
    assert [str(r.url) for r in seen] == [
        "https://am.example:9093/am/api/v2/alerts",
        "https://am.example:9093/am/api/v2/alerts",
        "https://am.example/api/v2/alerts",
    ]
    assert [r.headers["Authorization"] for r in seen] == [
        "Bearer t0ken-1",
        "Bearer t0ken-2",
        "Basic " + base64.b64encode(b"finops:pa55").decode(),
    ]
    token.unlink()
    missing = post_alerts(client, bearer, [])
    assert missing.outcome == "failed" and str(token) in missing.reason and "am.example:9093/…" in missing.reason
    nowhere = send(Channels(), client, "alertmanager", "site", {"alerts": []})
    assert (nowhere.outcome, nowhere.reason) == (
        "refused",
        "no Alertmanager named 'site' is configured (FINOPS_ALERT_ALERTMANAGERS)",
    )


def test_a_ca_file_is_trusted_for_its_alertmanager_only(tmp_path: Path) -> None:
    certificates = Certificates()
    ca = certificates.write(tmp_path).ca
    server = Webhook()
    server.server.socket = certificates.server.wrap_socket(server.server.socket, server_side=True)
    base = server.url.replace("http://", "https://").removesuffix("/services/T000/B000/s3cr3t-token")
    trusted = AlertmanagerTarget(url=base, ca_file=ca)
    worker = DeliveryWorker(sessionmaker(), Channels(alertmanagers={"site": trusted}))  # its HTTP client only
    try:
        assert send(worker.channels, worker.client, "alertmanager", "site", {"alerts": []}).outcome == "delivered"
        with httpx.Client(timeout=10) as plain:  # the system store does not know the test CA
            refused = post_alerts(plain, AlertmanagerTarget(url=base), [])
        assert refused.outcome == "failed" and "network error" in refused.reason
    finally:
        worker.close()
        server.close()
    assert server.received == [[]]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"url": "ftp://am.example"}, "http:// or https://"),
        ({"url": "https://user:pw@am.example"}, "no credentials"),
        ({"url": "https://am.example/?token=x"}, "no credentials, query"),
        ({"url": "http://am.example", "bearer_token_file": "/t"}, "https Alertmanager URL only"),
        ({"url": "https://am.example", "bearer_token_file": "/t", "username": "u", "password_file": "/p"}, "not both"),
        ({"url": "https://am.example", "username": "u"}, "needs both"),
        ({"url": "https://am.example", "token": "x"}, "Extra inputs"),
    ],
)
def test_bad_alertmanager_settings_are_refused(fields: dict[str, str], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        AlertmanagerTarget.model_validate(fields)


def test_settings_read_alertmanagers_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from finops.settings.combined import Settings

    monkeypatch.setenv("FINOPS_ALERT_ALERTMANAGERS", '{"site": {"url": "http://127.0.0.1:9093"}}')
    monkeypatch.setenv("FINOPS_ROLLUP_INTERVAL_SECONDS", "60")
    service = AlertService.from_settings(Settings())
    assert service.channels.alertmanagers == {"site": AlertmanagerTarget(url="http://127.0.0.1:9093")}
    assert service.evaluation_interval == timedelta(minutes=1)


def test_each_evaluation_queues_one_update_per_alertmanager_superseding_older_ones(
    sessions: sessionmaker[Session],
) -> None:
    config = parse_config(
        {"routes": [{"team": "vision", "alertmanager": ["site", "backup"]}], "default_route": {"slack": ["ops"]}},
        "test",
    )
    with sessions.begin() as session:
        session.add_all(
            [
                _idle(NOW - timedelta(hours=2), job="1"),
                _idle(NOW - timedelta(hours=2), NOW - timedelta(minutes=10), job="2"),  # resolved lately: sent
                _idle(NOW - timedelta(hours=2), NOW - timedelta(minutes=20), job="3"),  # resolved long ago: not
                _idle(NOW - timedelta(hours=2), team="nlp", job="4"),  # another route's
            ]
        )

    def queued(at: datetime) -> list[int]:
        with sessions.begin() as session:
            return queue_updates(
                session,
                config,
                at,
                evaluation_interval=timedelta(minutes=5),
                dashboard_url="https://finops.example",
                deadline=timedelta(hours=1),
            )

    first = queued(NOW)
    with sessions() as session:
        rows = session.scalars(select(AlertDelivery).order_by(AlertDelivery.target)).all()
    assert [(r.channel, r.target, r.title) for r in rows] == [
        ("alertmanager", "backup", "Alertmanager update: 1 firing, 1 resolved"),
        ("alertmanager", "site", "Alertmanager update: 1 firing, 1 resolved"),
    ]
    assert [a["labels"]["job"] for a in rows[1].payload["alerts"]] == ["1", "2"]  # type: ignore[index]
    assert "https://finops.example/idle" in json.dumps(rows[1].payload)

    with sessions.begin() as session:  # the first update to "site" went out, the one to "backup" did not
        session.get_one(AlertDelivery, first[1]).status = "delivered"
    second = queued(NOW + timedelta(minutes=5))
    with sessions() as session:
        assert sorted(session.scalars(select(AlertDelivery.id))) == sorted([first[1], *second])
    third = queued(NOW + timedelta(days=1, minutes=10))  # delivered a day ago: deleted, the undelivered too
    with sessions() as session:
        assert sorted(session.scalars(select(AlertDelivery.id))) == sorted(third)

    nothing = parse_config({"default_route": {"slack": ["ops"]}}, "test")
    with sessions.begin() as session:
        assert (
            queue_updates(
                session,
                nothing,
                NOW,
                evaluation_interval=timedelta(minutes=5),
                dashboard_url="",
                deadline=timedelta(hours=1),
            )
            == []
        )


def _silence(url: str, node: str) -> str:
    now = datetime.now(UTC)
    body = {
        "matchers": [{"name": "node", "value": node, "isRegex": False, "isEqual": True}],
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
        "createdBy": "test",
        "comment": "PSU swap",
    }
    response = httpx.post(f"{url}/api/v2/silences", json=body)
    response.raise_for_status()
    return str(response.json()["silenceID"])


def test_alerts_fire_and_resolve_in_a_real_alertmanager(tmp_path: Path, sessions: sessionmaker[Session]) -> None:
    binary = debian_binary("prometheus-alertmanager")
    now = minute_floor(utc_now())
    cluster = Cluster(sessions)
    for node in ("gpu-am-01", "gpu-am-02"):  # both fall silent 5 minutes ago
        cluster.readings(node, [0], now - timedelta(minutes=10), now - timedelta(minutes=5))
    receiver = Webhook()
    config = parse_config({"default_route": {"alertmanager": ["site"]}}, "test")
    try:
        with alertmanager(binary, tmp_path, receiver.url) as url:
            silence = _silence(url, "gpu-am-02")
            channels = Channels(alertmanagers={"site": AlertmanagerTarget(url=url)})
            service = AlertService(config, channels=channels, dashboard_url="https://finops.example")
            runner = AlertRunner(service, sessions)
            try:
                assert runner.evaluate().started == 2
                _, outcomes = runner.deliver()
                assert [(o.channel, o.target, o.status) for o in outcomes] == [("alertmanager", "site", "delivered")]

                (held,) = wait_until(lambda: listed(url, 'node="gpu-am-01"'), "gpu-am-01 listed")
                assert held["labels"] == {
                    "alertname": "collector-silent",
                    "rule": "collector-silent",
                    "severity": "critical",
                    "node": "gpu-am-01",
                }
                assert held["annotations"]["title"] == "Collector silent: gpu-am-01"
                assert held["annotations"]["summary"] and held["generatorURL"] == "https://finops.example/quality"
                assert held["status"]["state"] == "active"
                (muted,) = listed(url, 'node="gpu-am-02"')
                assert muted["status"] == {"state": "suppressed", "silencedBy": [silence], "inhibitedBy": []}

                def notified(status: str) -> list[dict[str, object]]:
                    return [
                        alert
                        for body in receiver.received
                        for alert in body["alerts"]
                        if alert["status"] == status and alert["labels"]["node"] == "gpu-am-01"
                    ]

                (firing,) = wait_until(lambda: notified("firing"), "the site's receiver told of gpu-am-01")
                assert firing["annotations"]["title"] == "Collector silent: gpu-am-01"

                cluster.readings(
                    "gpu-am-01", [0], utc_now() - timedelta(seconds=20), utc_now(), step=timedelta(seconds=10)
                )
                assert runner.evaluate().resolved == 1
                assert [o.status for o in runner.deliver()[1]] == ["delivered"]
                wait_until(lambda: not listed(url, 'node="gpu-am-01"'), "gpu-am-01 resolved in Alertmanager")
                (resolved, *_) = wait_until(lambda: notified("resolved"), "the site's receiver told it resolved")
                assert datetime.fromisoformat(str(resolved["endsAt"])) <= utc_now()
                assert listed(url, 'node="gpu-am-02"'), "the silenced alert still fires"
                assert not any(a["labels"]["node"] == "gpu-am-02" for b in receiver.received for a in b["alerts"])
            finally:
                runner.close()
    finally:
        receiver.close()
    with sessions() as session:
        rows = session.scalars(select(AlertDelivery)).all()
    assert {(r.channel, r.target) for r in rows} == {("alertmanager", "site")}
    assert all(url.split("//")[1] not in json.dumps(r.payload) + (r.last_error or "") for r in rows)
