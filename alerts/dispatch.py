"""When a group of alerts is notified: Alertmanager's grouping, group_wait / group_interval / repeat_interval and
dedup, as pure functions of the alerts, the group's notification log entry and the time.

Semantics (prometheus/alertmanager ``dispatch/dispatch.go`` aggregation groups and ``notify/notify.go``
DedupStage, as documented in its configuration reference):

- Alerts are grouped by the values of ``group_by`` labels (default: team and rule).
- A new group waits ``group_wait`` (default 30 s) from its first alert before its first notification, so alerts
  that fire together arrive together.
- After a notification, the group is looked at again every ``group_interval`` (default 5 min): it is notified
  if its set of firing alerts changed or some alert it had notified as firing is now resolved.
- With nothing changed and alerts still firing, it is notified again once ``repeat_interval`` (default 4 h) has
  passed since the last notification.
- Alerts that resolved before the group was ever notified are never announced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

DEFAULT_GROUP_BY = ("team", "rule")


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert instance: ``fingerprint`` identifies rule + labels; ``state`` is firing or resolved."""

    fingerprint: str
    labels: Mapping[str, str]
    state: Literal["firing", "resolved"]
    starts_at: datetime
    ends_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Timers:
    """A route's timing (Alertmanager names and defaults)."""

    group_wait: timedelta = timedelta(seconds=30)
    group_interval: timedelta = timedelta(minutes=5)
    repeat_interval: timedelta = timedelta(hours=4)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """What the group's last notification said (the notification log, kept in the database)."""

    sent_at: datetime
    firing: frozenset[str]


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to notify now, with which alerts, and when to look at the group again (None: nothing left)."""

    notify: bool
    firing: frozenset[str]
    resolved: frozenset[str]
    next_check: datetime | None


def group_key(labels: Mapping[str, str], group_by: Sequence[str] = DEFAULT_GROUP_BY) -> tuple[str, ...]:
    """The group an alert belongs to: its values of ``group_by`` ("" for a missing label)."""
    return tuple(labels.get(name, "") for name in group_by)


def group_alerts(
    alerts: Iterable[Alert], group_by: Sequence[str] = DEFAULT_GROUP_BY
) -> dict[tuple[str, ...], list[Alert]]:
    """Alerts by :func:`group_key`, in the order given."""
    groups: dict[tuple[str, ...], list[Alert]] = {}
    for alert in alerts:
        groups.setdefault(group_key(alert.labels, group_by), []).append(alert)
    return groups


def decide(
    alerts: Sequence[Alert], last: LogEntry | None, group_created: datetime, now: datetime, timers: Timers = Timers()
) -> Decision:
    """The notification decision for one group at ``now``.

    ``alerts`` are the group's current alert instances; ``last`` its log entry (None if never notified);
    ``group_created`` when its first alert arrived.
    """
    firing = frozenset(a.fingerprint for a in alerts if a.state == "firing")
    if last is None:
        ready = group_created + timers.group_wait
        if now < ready:
            return Decision(False, firing, frozenset(), ready)
        if not firing:
            return Decision(False, firing, frozenset(), None)  # resolved before anyone was told
        return Decision(True, firing, frozenset(), now + timers.group_interval)
    resolved = frozenset(a.fingerprint for a in alerts if a.state == "resolved") & last.firing
    due = last.sent_at + timers.group_interval
    if now < due:
        return Decision(False, firing, resolved, due)
    changed = firing != last.firing or bool(resolved)
    repeat = bool(firing) and now >= last.sent_at + timers.repeat_interval
    if changed or repeat:
        return Decision(True, firing, resolved, now + timers.group_interval if firing else None)
    next_check = min(now + timers.group_interval, last.sent_at + timers.repeat_interval) if firing else None
    return Decision(False, firing, resolved, next_check)
