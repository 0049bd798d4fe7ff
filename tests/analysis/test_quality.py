"""Data quality on the scenario: node freshness, attributed and metered shares (both databases)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.quality import coverage, node_freshness
from finops.analysis.report import cost_report
from tests.support import scenario


def test_freshness_and_coverage_of_the_scenario(database_url: str, sessions: sessionmaker[Session]) -> None:
    scenario.seed_dashboard_database(database_url)
    t0 = scenario.start_hour()
    now = t0 + timedelta(hours=3)
    with sessions() as session:
        (node,) = node_freshness(session, now)
        rows = cost_report(session, t0, t0 + timedelta(hours=2), "team")
    readings = scenario.samples(t0)
    last = max(r.timestamp for r in readings)
    assert (node.node, node.gpus, node.last_reading) == (scenario.NODE, 2, last)
    assert node.silent_seconds == (now - last).total_seconds()
    quality = coverage(rows)
    capacity = 2 * 2 * 3600  # 2 GPUs for 2 hours
    assert quality.capacity_gpu_seconds == capacity
    # tests/support/scenario.py: alpha holds 1.5 GPU-hours and __unmapped__ 1.5 of the 4; readings cover both hours
    assert quality.attributed_share == 0.75
    assert (quality.metered_share, quality.unmetered_gpu_seconds) == (1.0, 0)
