"""Evaluation and dispatch against the database, both backends: group_wait, dedup across restarts, resolved
messages, repeat_interval, silences, event alerts that end silently, two dispatchers at once."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import AlertConfig, parse_config
from alerts.engine import Dispatched, RuleInputs, dispatch, evaluate
from alerts.message import Message
from alerts.models import AlertDelivery, AlertGroup
from alerts.render import Shown, render_group
from alerts.store import create_silence, expire_silence
from finops.analysis.events import BUDGET_THRESHOLD, record_event
from finops.db.engine import make_engine, session_factory
from finops.timeutil import utc_now
from tests.support.alert_cluster import Cluster, minute_floor

CONFIG = parse_config({"default_route": {"slack": ["ops"], "email": ["gpu-ops@example.org"]}}, "test")
INPUTS = RuleInputs(collector_interval_seconds=10)
S = timedelta(seconds=1)


class Service:
    """The alert jobs on one database, reopened from scratch on :meth:`restart` (nothing kept in memory)."""

    def __init__(self, engine: Engine, config: AlertConfig = CONFIG) -> None:
        self.url = engine.url.render_as_string(hide_password=False)
        self.config = config
        self.engine = make_engine(self.url)
        self.sessions = session_factory(self.engine)

    def restart(self) -> None:
        self.engine.dispose()
        self.engine = make_engine(self.url)
        self.sessions = session_factory(self.engine)

    def evaluate(self, now: datetime) -> None:
        with self.sessions.begin() as session:
            evaluate(session, self.config, INPUTS, now)

    def dispatch(self, now: datetime) -> Dispatched:
        return dispatch(self.sessions, self.config, now, dashboard_url="http://dash", deadline=timedelta(hours=1))

    def outbox(self) -> list[tuple[str, str, str]]:
        with self.sessions() as session:
            rows = session.scalars(select(AlertDelivery).order_by(AlertDelivery.id)).all()
        return [(row.channel, row.target, row.title) for row in rows]

    def payloads(self) -> list[dict[str, Any]]:
        with self.sessions() as session:
            return [dict(p) for p in session.scalars(select(AlertDelivery.payload).order_by(AlertDelivery.id))]

    def close(self) -> None:
        self.engine.dispose()


def _silent_nodes(sessions: sessionmaker[Session], now: datetime, *nodes: str) -> None:
    """Nodes whose readings stopped 40 s before ``now`` (silent with 10 s intervals)."""
    cluster = Cluster(sessions)
    for node in nodes:
        cluster.readings(node, [0], now - timedelta(minutes=5), now - 40 * S, step=10 * S)


def _report_again(sessions: sessionmaker[Session], node: str, until: datetime) -> None:
    Cluster(sessions).readings(node, [0], until - timedelta(minutes=1), until + S, step=10 * S)


def test_group_wait_one_message_and_no_duplicate_after_a_restart(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    t0 = minute_floor(utc_now())
    _silent_nodes(sessions, t0, "gpu-s-01", "gpu-s-02")
    service = Service(engine)
    try:
        service.evaluate(t0)
        assert service.dispatch(t0).deliveries == [], "group_wait: not before 30 s"
        service.restart()
        assert service.dispatch(t0 + 29 * S).deliveries == []
        first = service.dispatch(t0 + 30 * S)
        assert first.notifications == 1 and len(first.deliveries) == 2, "one message, to Slack and to e-mail"
        assert service.outbox() == [
            ("slack", "ops", "[FIRING:2] Collectors silent"),
            ("email", "gpu-ops@example.org", "[FIRING:2] Collectors silent"),
        ]
        payload = service.payloads()[0]
        assert [name for name, _ in payload["fields"]] == ["gpu-s-01", "gpu-s-02"]
        assert payload["link"] == ["Open in gpu-finops", "http://dash/quality"]
        for minutes in (1, 6, 60, 230):  # restarts and re-evaluations with nothing new send nothing
            service.restart()
            service.evaluate(t0 + timedelta(minutes=minutes))
            assert service.dispatch(t0 + timedelta(minutes=minutes)).deliveries == []
        service.evaluate(t0 + 30 * S + timedelta(hours=4))
        repeat = service.dispatch(t0 + 30 * S + timedelta(hours=4))
        assert repeat.notifications == 1, "repeat_interval: sent again after 4 h"
        assert len(service.outbox()) == 4
    finally:
        service.close()


def test_resolutions_are_announced_once_and_the_group_closes(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    t0 = minute_floor(utc_now())
    _silent_nodes(sessions, t0, "gpu-s-01", "gpu-s-02")
    service = Service(engine)
    try:
        service.evaluate(t0)
        service.dispatch(t0 + 30 * S)
        _report_again(sessions, "gpu-s-01", t0 + timedelta(minutes=2))
        service.evaluate(t0 + timedelta(minutes=2))
        assert service.dispatch(t0 + timedelta(minutes=2)).deliveries == [], "within group_interval"
        changed = service.dispatch(t0 + 30 * S + timedelta(minutes=5))
        assert changed.notifications == 1
        assert service.outbox()[-1][2] == "[FIRING:1, RESOLVED:1] Collectors silent"
        assert [name for name, _ in service.payloads()[-1]["fields"]] == ["gpu-s-02", "Resolved: gpu-s-01"]
        for node in ("gpu-s-01", "gpu-s-02"):
            _report_again(sessions, node, t0 + timedelta(minutes=7))
        service.evaluate(t0 + timedelta(minutes=7))
        clear = service.dispatch(t0 + 30 * S + timedelta(minutes=10))
        assert clear.notifications == 1
        assert service.outbox()[-1][2] == "[RESOLVED] Collector silent: gpu-s-02"
        with service.sessions() as session:
            assert session.scalar(select(func.count()).select_from(AlertGroup)) == 0, "nothing left to tell"
        assert service.dispatch(t0 + timedelta(hours=5)).deliveries == []
    finally:
        service.close()


def test_an_alert_resolved_within_group_wait_is_never_sent(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    t0 = minute_floor(utc_now())
    _silent_nodes(sessions, t0, "gpu-s-01")
    service = Service(engine)
    try:
        service.evaluate(t0)
        _report_again(sessions, "gpu-s-01", t0 + 20 * S)
        service.evaluate(t0 + 20 * S)
        assert service.dispatch(t0 + 30 * S).deliveries == []
        assert service.dispatch(t0 + timedelta(hours=1)).deliveries == []
        assert service.outbox() == []
    finally:
        service.close()


def test_a_silence_mutes_until_it_is_expired(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    t0 = minute_floor(utc_now())
    _silent_nodes(sessions, t0, "gpu-s-01", "gpu-s-02")
    service = Service(engine)
    try:
        with service.sessions.begin() as session:
            silence = create_silence(
                session,
                ['node="gpu-s-01"'],
                t0 + timedelta(hours=2),
                t0,
                created_by="ops",
                comment="rack move",
                actor="system:test",
            )
        service.evaluate(t0)
        service.dispatch(t0 + 30 * S)
        assert service.outbox()[-1][2] == "[FIRING] Collector silent: gpu-s-02"
        with service.sessions.begin() as session:
            assert expire_silence(session, silence, t0 + timedelta(minutes=1), actor="system:test")
            assert not expire_silence(session, silence, t0 + timedelta(minutes=1), actor="system:test")
        assert service.dispatch(t0 + timedelta(minutes=2)).deliveries == []
        again = service.dispatch(t0 + 30 * S + timedelta(minutes=5))
        assert again.notifications == 1 and service.outbox()[-1][2] == "[FIRING:2] Collectors silent"
    finally:
        service.close()


def _budget_event(sessions: sessionmaker[Session], now: datetime, threshold: int) -> None:
    payload = {"team": "vision", "project": "", "month": f"{now:%Y-%m}", "budget": "1000.000000",
               "spent": "812.340000", "used_percent": "81.2", "forecast": "1500.000000", "currency": "USD",
               "threshold_percent": threshold}  # fmt: skip
    with sessions.begin() as session:
        record_event(session, BUDGET_THRESHOLD, f"budget:vision::{now:%Y-%m}:{threshold}", None, now, payload)


def test_a_budget_alert_is_sent_once_and_ends_silently(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    t0 = minute_floor(utc_now())
    config = parse_config({"routes": [{"team": "vision", "slack": "vision"}]}, "test")
    _budget_event(sessions, t0, 80)
    service = Service(engine, config)
    try:
        service.evaluate(t0)
        service.dispatch(t0 + 30 * S)
        assert service.outbox() == [("slack", "vision", "[FIRING] Budget 80 % reached: team vision")]
        payload = service.payloads()[0]
        assert "812.34 USD of its 1,000.00 USD budget" in payload["summary"] and payload["severity"] == "warning"
        for hours in (4, 30, 24 * 10):  # repeat_interval "never" for budget rules
            service.evaluate(t0 + timedelta(hours=hours))
            service.dispatch(t0 + timedelta(hours=hours))
        month_end = datetime(t0.year + t0.month // 12, t0.month % 12 + 1, 1, tzinfo=t0.tzinfo)
        service.evaluate(month_end + timedelta(minutes=1))
        service.dispatch(month_end + timedelta(minutes=10))
        assert len(service.outbox()) == 1, "no repeat, no resolved message for a fact"
    finally:
        service.close()


def test_a_route_without_targets_records_the_notification_only(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    t0 = minute_floor(utc_now())
    _silent_nodes(sessions, t0, "gpu-s-01")
    service = Service(engine, AlertConfig())
    try:
        service.evaluate(t0)
        done = service.dispatch(t0 + 30 * S)
        assert (done.groups, done.deliveries) == (1, [])
        with service.sessions() as session:
            (group,) = session.scalars(select(AlertGroup)).all()
        assert group.notified_at == t0 + 30 * S and len(group.notified_firing) == 1
    finally:
        service.close()


def test_two_dispatchers_at_once_make_one_notification(engine, sessions) -> None:  # type: ignore[no-untyped-def]
    t0 = minute_floor(utc_now())
    _silent_nodes(sessions, t0, "gpu-s-01", "gpu-s-02")
    first, second = Service(engine), Service(engine)
    try:
        first.evaluate(t0)
        start = threading.Barrier(2)
        results: list[Dispatched] = []

        def run(service: Service) -> None:
            start.wait()
            results.append(service.dispatch(t0 + 30 * S))

        threads = [threading.Thread(target=run, args=(s,)) for s in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(r.notifications for r in results) == 1
        assert len(first.outbox()) == 2, "one message, two targets"
    finally:
        first.close()
        second.close()


def test_render_group_titles_and_fields() -> None:
    idle = Shown("idle-gpu", "warning", {"title": "Idle GPUs: job 1", "name": "job 1", "summary": "8 GPUs idle",
                                          "fields": [["Team", "vision"]], "page": "idle"})  # fmt: skip
    other = Shown("idle-gpu", "critical", {"name": "job 2", "summary": "4 GPUs idle", "page": "idle"})
    one = render_group([idle], [], {"team": "vision", "rule": "idle-gpu"}, "http://dash/")
    assert one == Message("[FIRING] Idle GPUs: job 1", "8 GPUs idle", [("Team", "vision")],
                          ("Open in gpu-finops", "http://dash/idle"), "warning")  # fmt: skip
    two = render_group([idle, other], [], {"team": "vision", "rule": "idle-gpu"}, "http://dash")
    assert two.title == "[FIRING:2] Idle GPUs: team vision" and two.severity == "critical"
    assert two.fields == [("job 1", "8 GPUs idle"), ("job 2", "4 GPUs idle")]
    gone = render_group([], [idle], {"team": "vision", "rule": "idle-gpu"}, "http://dash")
    assert gone.title == "[RESOLVED] Idle GPUs: job 1" and gone.summary == "Resolved: 8 GPUs idle"
    assert render_group([idle], [], {"team": "vision", "rule": "idle-gpu"}, "").link is None, "no dashboard URL"
