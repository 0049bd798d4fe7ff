"""Budget threshold and forecast events, spend anomalies (median/MAD), each recorded once and taken once."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from finops.analysis.anomalies import find_anomalies, is_anomalous, modified_z, record_anomaly_events
from finops.analysis.budgets import budget_status, record_budget_events, set_budget
from finops.analysis.events import BUDGET_FORECAST, BUDGET_THRESHOLD, SPEND_ANOMALY, list_events, take_events
from finops.db.ledger_tables import LedgerEntry
from finops.jobs.teams import team_by_name
from finops.ledger.team_hours import refresh_team_hours
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from tests.support import scenario


def test_thresholds_are_recorded_once_each(loaded) -> None:  # type: ignore[no-untyped-def]
    """alpha spent 1.5 r in the slice: with a budget of 1.6 r it has crossed 50 % and 80 %, not 100 %."""
    sessions, t0, r, _ = loaded
    at = t0 + timedelta(hours=2)
    with sessions.begin() as session:
        set_budget(session, "alpha", (r * Decimal("1.6")).quantize(Decimal("0.01")), t0, "USD", actor="system:test")
        record_budget_events(session, at)
        record_budget_events(session, at)  # the next scheduler run: nothing new
    with sessions() as session:
        events = list_events(session, kind=BUDGET_THRESHOLD)
        (status,) = budget_status(session, at)
    assert sorted(e.payload["threshold_percent"] for e in events) == [50, 80]
    assert {e.team for e in events} == {"alpha"}
    assert Decimal(events[0].payload["spent"]) == status.spent == (r * Decimal("1.5")).quantize(Decimal("0.000001"))
    with sessions.begin() as session:
        set_budget(session, "alpha", (r * Decimal("1.4")).quantize(Decimal("0.01")), t0, "USD", actor="system:test")
        record_budget_events(session, at)
    with sessions() as session:
        thresholds = sorted(e.payload["threshold_percent"] for e in list_events(session, kind=BUDGET_THRESHOLD))
        forecasts = list_events(session, kind=BUDGET_FORECAST)
    assert thresholds == [50, 80, 100]
    assert [e.team for e in forecasts] == ["alpha"]  # a 1.5 r burn in 2 h runs far past the month's budget


def test_events_are_taken_once(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, r, _ = loaded
    at = t0 + timedelta(hours=2)
    with sessions.begin() as session:
        set_budget(session, "alpha", r, t0, "USD", actor="system:test")
        record_budget_events(session, at)
    with sessions.begin() as session:
        first = take_events(session, at)
    with sessions.begin() as session:
        second = take_events(session, at)
        record_budget_events(session, at)
        third = take_events(session, at)
    assert len(first) == 4 and second == [] and third == []


def test_project_budget_counts_only_its_jobs(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    with sessions.begin() as session:
        set_budget(session, "alpha", Decimal("100"), t0, "USD", project="llm", actor="system:test")
        (status,) = budget_status(session, t0 + timedelta(hours=2))
    assert (status.project, status.spent) == ("llm", 0)


def test_modified_z_hand_example() -> None:
    # Baseline 10, 10, 11, 12, 12 (+ two more 11s): median 11, MAD 1; 20 → 0.6745 × 9 / 1 = 6.0705.
    baseline = [Decimal(v) for v in (10, 10, 11, 11, 11, 12, 12)]
    assert modified_z(Decimal(20), baseline) == Decimal("6.0705")
    assert is_anomalous(Decimal(20), baseline)
    assert not is_anomalous(Decimal(13), baseline)  # z = 1.349
    flat = [Decimal(100)] * 7
    assert modified_z(Decimal(150), flat) is None and is_anomalous(Decimal(150), flat)
    assert not is_anomalous(Decimal("100.50"), flat)  # under the 1-unit minimum deviation


@pytest.fixture
def spend_history(sessions):  # type: ignore[no-untyped-def]
    """Team vision spends about 100 a day for 14 days, then 400 on the 15th; team nlp a steady 50 (ledger rows
    written directly, then their team-hours)."""
    day0 = date(2026, 10, 1)
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    with sessions.begin() as session:
        gpu = scenario.one_gpu_node(session)
        teams = {name: team_by_name(session, name).id for name in ("vision", "nlp")}
        for i in range(15):
            hour = datetime.combine(day0 + timedelta(days=i), datetime.min.time(), UTC) + timedelta(hours=5)
            daily = {"vision": Decimal(400 if i == 14 else 100 + (i % 3)), "nlp": Decimal(50)}
            for team, amount in daily.items():
                session.add(
                    LedgerEntry(
                        hour=hour, gpu_id=gpu.id, job_pk=None, team_id=teams[team], seconds=3600,
                        used_gpu_seconds=0.0, sample_count=0, energy_joules=0.0, allocated_cost=amount,
                        used_cost=Decimal(0), idle_cost=Decimal(0), energy_cost=Decimal(0),
                        currency=pricing.catalog.currency, pricing_model="on-demand",
                    )
                )  # fmt: skip
        session.flush()
        refresh_team_hours(session, datetime.combine(day0, datetime.min.time(), UTC), hour + timedelta(hours=1))
    return sessions, day0 + timedelta(days=14)


def test_spend_anomaly_found_and_recorded_once(spend_history) -> None:  # type: ignore[no-untyped-def]
    sessions, day = spend_history
    with sessions() as session:
        (anomaly,) = find_anomalies(session, day)
        assert find_anomalies(session, day - timedelta(days=1)) == []
    assert (anomaly.team, anomaly.spend, anomaly.baseline_median) == ("vision", 400, 101)
    at = datetime.combine(day + timedelta(days=1), datetime.min.time(), UTC)
    with sessions.begin() as session:
        assert record_anomaly_events(session, at) == 1
        record_anomaly_events(session, at)
    with sessions() as session:
        (event,) = list_events(session, kind=SPEND_ANOMALY)
    assert event.payload["spend"] == "400.000000" and event.team == "vision"
