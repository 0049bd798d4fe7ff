"""Alertmanager-style grouping and timing: group_wait, group_interval, repeat_interval, resolved, dedup."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alerts.dispatch import Alert, LogEntry, Timers, decide, group_alerts, group_key

T0 = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def _alert(fingerprint: str, state: str = "firing", team: str = "vision", rule: str = "idle-gpu") -> Alert:
    return Alert(fingerprint, {"team": team, "rule": rule, "job": fingerprint}, state, T0)  # type: ignore[arg-type]


def test_grouping_by_team_and_rule() -> None:
    alerts = [_alert("a"), _alert("b"), _alert("c", team="nlp"), _alert("d", rule="budget-80")]
    groups = group_alerts(alerts)
    assert {key: [a.fingerprint for a in group] for key, group in groups.items()} == {
        ("vision", "idle-gpu"): ["a", "b"],
        ("nlp", "idle-gpu"): ["c"],
        ("vision", "budget-80"): ["d"],
    }
    assert group_key({"rule": "x"}) == ("", "x")


def test_group_wait_then_one_notification_for_alerts_that_fire_together() -> None:
    early = decide([_alert("a")], None, T0, T0 + 10 * S)
    assert (early.notify, early.next_check) == (False, T0 + 30 * S)
    first = decide([_alert("a"), _alert("b")], None, T0, T0 + 30 * S)
    assert first.notify and first.firing == {"a", "b"}
    assert first.next_check == T0 + 30 * S + timedelta(minutes=5)


def test_nothing_new_is_not_sent_again_until_the_repeat_interval() -> None:
    last = LogEntry(T0, frozenset({"a"}))
    assert not decide([_alert("a")], last, T0, T0 + timedelta(minutes=4)).notify
    quiet = decide([_alert("a")], last, T0, T0 + timedelta(minutes=10))
    assert not quiet.notify, "dedup: the same firing set is not sent twice"
    assert quiet.next_check == T0 + timedelta(minutes=15)
    assert decide([_alert("a")], last, T0, T0 + timedelta(hours=4)).notify, "repeat_interval"


def test_a_new_alert_in_the_group_waits_for_the_group_interval() -> None:
    last = LogEntry(T0, frozenset({"a"}))
    soon = decide([_alert("a"), _alert("b")], last, T0, T0 + timedelta(minutes=1))
    assert (soon.notify, soon.next_check) == (False, T0 + timedelta(minutes=5))
    due = decide([_alert("a"), _alert("b")], last, T0, T0 + timedelta(minutes=5))
    assert due.notify and due.firing == {"a", "b"}


def test_resolution_is_announced_once_and_unseen_resolutions_never() -> None:
    last = LogEntry(T0, frozenset({"a", "b"}))
    resolved = decide([_alert("a"), _alert("b", "resolved")], last, T0, T0 + timedelta(minutes=5))
    assert resolved.notify and (resolved.firing, resolved.resolved) == ({"a"}, {"b"})
    all_clear = decide([_alert("a", "resolved")], LogEntry(T0, frozenset({"a"})), T0, T0 + timedelta(minutes=5))
    assert all_clear.notify and all_clear.resolved == {"a"} and all_clear.next_check is None
    after = decide([_alert("a", "resolved")], LogEntry(T0 + timedelta(minutes=5), frozenset()), T0,
                   T0 + timedelta(hours=5))  # fmt: skip
    assert not after.notify and after.next_check is None
    never_told = decide([_alert("z", "resolved")], None, T0, T0 + timedelta(minutes=1))
    assert not never_told.notify and never_told.next_check is None


def test_custom_timers() -> None:
    timers = Timers(group_wait=timedelta(0), group_interval=timedelta(minutes=1), repeat_interval=timedelta(minutes=2))
    assert decide([_alert("a")], None, T0, T0, timers).notify
    assert decide([_alert("a")], LogEntry(T0, frozenset({"a"})), T0, T0 + timedelta(minutes=2), timers).notify
