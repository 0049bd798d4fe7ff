"""Alerts selected by state, period and team in the query (:func:`alerts.store.select_alerts`), on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from alerts.store import list_alerts, select_alerts
from tests.support.alert_rows import alert_row

T = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)


def test_period_and_team_select_the_alerts_that_held_then(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        session.add_all(
            [
                alert_row("idle-gpu", "warning", {"team": "alpha", "job": "1"}, T - 3 * H, T - 2 * H, "ended before"),
                alert_row("idle-gpu", "warning", {"team": "alpha", "job": "2"}, T - 2 * H, T, "ended at the start"),
                alert_row("idle-gpu", "warning", {"team": "alpha", "job": "3"}, T - 2 * H, T + H, "ran into it"),
                alert_row("idle-gpu", "warning", {"team": "beta", "job": "4"}, T + H, T + 2 * H, "inside, beta"),
                alert_row("budget", "critical", {"team": "alpha"}, T + 2 * H, None, "firing since inside"),
                alert_row("gpu-lost", "critical", {"node": "n1"}, T - 5 * H, None, "firing, no team"),
                alert_row("idle-gpu", "warning", {"team": "alpha", "job": "5"}, T + 3 * H, T + 4 * H, "starts at end"),
            ]
        )
    with sessions() as session:

        def titles(state: str, **kw: object) -> list[str]:
            return [a.title for a in select_alerts(session, T + 5 * H, state, **kw)]  # type: ignore[arg-type]

        window = {"start": T, "end": T + 3 * H}
        assert titles("all", **window) == ["firing since inside", "inside, beta", "ran into it", "firing, no team"]
        assert titles("resolved", **window) == ["inside, beta", "ran into it"]
        assert titles("firing", **window, team="alpha") == ["firing since inside"]
        assert titles("all", **window, team="alpha") == ["firing since inside", "ran into it"]
        assert titles("all", start=T + 3 * H) == ["starts at end", "firing since inside", "firing, no team"]
        assert titles("all", end=T - 2 * H) == ["ended before", "firing, no team"]
        assert titles("all", team="nobody") == []
        assert titles("firing") == [a.title for a in list_alerts(session, T + 5 * H, "firing")]
