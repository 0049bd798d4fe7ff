"""Data quality: node freshness, attributed and metered shares on the scenario; the causes of unattributed GPU time
on a small cluster (both databases)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from finops.analysis.quality import coverage, node_freshness, unattributed_causes
from finops.analysis.report import cost_report
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import floor_hour, from_epoch, to_epoch, utc_now
from tests.support import scenario
from tests.support.alert_cluster import Cluster, Values, idle


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


def _utilised(ratio: float) -> Values:
    def values(index: int, at: datetime) -> dict[str, float]:
        return {**idle(index, at), m.GPU_UTILIZATION: ratio}

    return values


def test_unattributed_time_is_split_into_no_job_and_unknown_jobs(sessions: sessionmaker[Session]) -> None:
    t0 = from_epoch(floor_hour(to_epoch(utc_now()))) - timedelta(hours=4)
    end = t0 + timedelta(hours=3)
    cluster = Cluster(sessions)
    # GPU 0: job 9201 for 90 minutes, then idle with no job id: the rest of its hour and the hour after are no job.
    cluster.readings("gpu-u-01", [0], t0, t0 + timedelta(minutes=90), job="9201")
    cluster.readings("gpu-u-01", [0], t0 + timedelta(minutes=90), end, values=idle)
    # GPU 1: readings name job 9299, which was never imported: an unknown job all along.
    cluster.readings("gpu-u-01", [1], t0, end, job="9299")
    # GPU 2: busy with no job id for the first half hour, then idle: half of that hour is an unknown job.
    cluster.readings("gpu-u-01", [2], t0, t0 + timedelta(minutes=30))
    cluster.readings("gpu-u-01", [2], t0 + timedelta(minutes=30), end, values=idle)
    # GPU 3: just above the idle threshold with no job id for an hour: an unknown job; at the threshold: no job.
    cluster.readings("gpu-u-01", [3], t0, t0 + timedelta(hours=1), values=_utilised(0.06))
    cluster.readings("gpu-u-01", [3], t0 + timedelta(hours=1), end, values=_utilised(0.05))
    cluster.job("9201", "cv-lab", "erin", "gpu-u-01", 1, t0, t0 + timedelta(minutes=90), team="vision")
    with sessions.begin() as session:
        rollup(session, Pricing(load_catalog(), PricingModel.ON_DEMAND), to_epoch(end))
    with sessions() as session:
        causes = unattributed_causes(session, t0, end, 0.05)
        (unallocated,) = [r for r in cost_report(session, t0, end, "team") if r.key == "__unallocated__"]
    no_job = 5400 + 0 + (1800 + 7200) + 7200
    unknown = 0 + 10800 + 1800 + 3600
    assert (causes.no_job_gpu_seconds, causes.unknown_job_gpu_seconds) == pytest.approx((no_job, unknown))
    assert no_job + unknown == unallocated.allocated_gpu_seconds, "the two causes are all of __unallocated__"
    with sessions() as session:
        later = unattributed_causes(session, end, end + timedelta(hours=1), 0.05)
    assert (later.no_job_gpu_seconds, later.unknown_job_gpu_seconds) == (0, 0), "no ledger hours: nothing to split"
