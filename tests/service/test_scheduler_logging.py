"""The scheduler's logs, both databases: quiet (DEBUG) while there is nothing to do, however many runs; one INFO
line for a rollup that took in new readings or late ones for past hours, and none for the rollups after it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session, sessionmaker

from alerts.config import parse_config
from alerts.service import AlertRunner, AlertService
from finops.analysis.idle import IdlePolicy
from finops.cli.base import log_to_stderr
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.service.cost_metrics import CostMetrics
from finops.service.scheduler import RollupProgress, run_rollup, start_scheduler
from finops.timeutil import utc_now
from tests.service.job_runs import JobRuns
from tests.support.alert_cluster import Cluster, minute_floor

PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
ROLLUP_LOGGER = "finops.service.scheduler"


@pytest.fixture
def service_logging(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The log levels of the ``serve`` process (:func:`finops.cli.base.log_to_stderr` at INFO), every record captured
    from DEBUG up; each logger's level is put back afterwards."""
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in logging.Logger.manager.loggerDict)]
    levels = {logger: logger.level for logger in loggers}
    log_to_stderr(logging.INFO)
    try:
        with caplog.at_level(logging.DEBUG):
            yield caplog
    finally:
        for logger, level in levels.items():
            logger.setLevel(level)


def _rollup_records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    """(level, message) of the rollup lines captured, then forgets every record."""
    found = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == ROLLUP_LOGGER]
    caplog.clear()
    return found


def _info_and_above(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines at INFO and above that the scheduled jobs logged (not the test's own ingest, in this thread)."""
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.INFO and r.thread != threading.get_ident()
    ]


def test_a_rollup_logs_info_only_when_it_took_in_something_new(
    sessions: sessionmaker[Session], service_logging: pytest.LogCaptureFixture
) -> None:
    progress = RollupProgress()
    # A minute back: the readings stamped "now" below are then in the past at every rollup, whatever second of its
    # minute the test starts at.
    now = minute_floor(utc_now()) - timedelta(minutes=1)
    for _ in range(2):
        run_rollup(sessions, PRICING, IdlePolicy(), progress)
    assert [level for level, _ in _rollup_records(service_logging)] == [logging.DEBUG] * 2, "an empty database"

    Cluster(sessions).readings("gpu-l-01", [0, 1], now - timedelta(minutes=5), now)
    for _ in range(3):
        run_rollup(sessions, PRICING, IdlePolicy(), progress)
    (first, *after) = _rollup_records(service_logging)
    assert first[0] == logging.INFO and "GPU-hours priced" in first[1], first
    assert [level for level, _ in after] == [logging.DEBUG] * 2, "the same readings: capacity accrues, nothing new"

    # A spool delivered late: readings of three hours ago mark a past hour, rebuilt once.
    Cluster(sessions).readings("gpu-l-01", [0, 1], now - timedelta(hours=3), now - timedelta(hours=3, minutes=-5))
    for _ in range(2):
        run_rollup(sessions, PRICING, IdlePolicy(), progress)
    assert [level for level, _ in _rollup_records(service_logging)] == [logging.INFO, logging.DEBUG]

    # More readings in the hours already built.
    Cluster(sessions).readings("gpu-l-01", [0, 1], now, now + timedelta(seconds=1))
    run_rollup(sessions, PRICING, IdlePolicy(), progress)
    assert [level for level, _ in _rollup_records(service_logging)] == [logging.INFO]

    run_rollup(sessions, PRICING, IdlePolicy())  # gpu-finops rollup: always says what it did
    assert [level for level, _ in _rollup_records(service_logging)] == [logging.INFO]


def test_the_scheduler_is_quiet_until_a_rollup_takes_in_readings(
    sessions: sessionmaker[Session], service_logging: pytest.LogCaptureFixture
) -> None:
    quiet_rules = {name: {"enabled": False} for name in ("collector-silent", "gpu-lost", "data-quality")}
    service = AlertService(parse_config({"rules": quiet_rules}, "test"), poll_seconds=0.2)
    runner = AlertRunner(service, sessions)
    scheduler = start_scheduler(sessions, PRICING, IdlePolicy(), CostMetrics(CollectorRegistry()), 1, alerts=runner)
    try:
        runs = JobRuns(scheduler)
        runs.wait("rollup", 3)
        runs.wait("alert_delivery", 5)
        assert _info_and_above(service_logging) == [], "nothing to do: every line at DEBUG"
        assert {level for level, _ in _rollup_records(service_logging)} == {logging.DEBUG}

        now = minute_floor(utc_now())
        Cluster(sessions).readings("gpu-l-02", [0, 1], now - timedelta(minutes=5), now)
        runs.wait("rollup", 3)
        runs.wait("alert_delivery", 2)
    finally:
        scheduler.shutdown(wait=True)
        runner.close()
    lines = _info_and_above(service_logging)
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith(f"{ROLLUP_LOGGER} INFO: rollup: ") and "GPU-hours priced" in line
