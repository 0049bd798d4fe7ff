"""One alert as the alert engine stores it, for tests that seed alerts directly."""

from __future__ import annotations

from datetime import datetime

from alerts.engine import fingerprint
from alerts.models import AlertInstance


def alert_row(
    rule: str, severity: str, labels: dict[str, str], start: datetime, end: datetime | None, title: str
) -> AlertInstance:
    labels = {**labels, "rule": rule, "severity": severity}
    return AlertInstance(
        fingerprint=fingerprint(rule, labels),
        rule=rule,
        labels=labels,
        annotations={"title": title, "summary": f"{title}."},
        figures={},
        severity=severity,
        state="firing" if end is None else "resolved",
        starts_at=start,
        ends_at=end,
        last_evaluated_at=end or start,
        group_key="",
    )
