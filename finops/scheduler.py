"""The service's periodic work on APScheduler 3.x: ledger rollup with idle detection, and budget status.

Runs in the ``serve`` process by default (``--no-scheduler`` leaves it to another process). Each job
opens its own session and transaction; a failing run is logged by APScheduler and retried next interval.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy.orm import Session, sessionmaker

from finops.budgets import budget_status
from finops.idle import IdlePolicy, detect_idle
from finops.ledger import Pricing, rollup
from finops.timeutil import to_epoch, utc_now

log = logging.getLogger(__name__)

IDLE_LOOKBACK = timedelta(hours=6)


def run_rollup(sessions: sessionmaker[Session], pricing: Pricing, policy: IdlePolicy) -> tuple[int, int]:
    """Rebuild dirty ledger hours up to now, then re-judge idle episodes of the last 6 hours.

    Returns (hours rebuilt, idle episodes stored).
    """
    now = utc_now()
    with sessions.begin() as session:
        hours = rollup(session, pricing, to_epoch(now))
        episodes = detect_idle(session, now - IDLE_LOOKBACK, now, policy, pricing)
    log.info("rollup: %d ledger hours rebuilt, %d idle episodes", hours, episodes)
    return hours, episodes


class BudgetGauges:
    """``gpufinops_budget_used_ratio{team}``: month-to-date spend ÷ budget, refreshed by the scheduler."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.used = Gauge(
            "gpufinops_budget_used_ratio", "Month-to-date spend / monthly budget.", ["team"], registry=registry
        )

    def refresh(self, sessions: sessionmaker[Session]) -> None:
        """Recompute every team's budget ratio for the current month."""
        with sessions() as session:
            for status in budget_status(session, utc_now()):
                ratio = float(status.spent / status.budget) if status.budget else 0.0
                self.used.labels(team=status.team).set(ratio)


def start_scheduler(
    sessions: sessionmaker[Session],
    pricing: Pricing,
    policy: IdlePolicy,
    budgets: BudgetGauges,
    rollup_interval_seconds: int,
) -> BackgroundScheduler:
    """Start the background scheduler with the rollup and budget jobs; the caller shuts it down."""
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(
        run_rollup,
        "interval",
        seconds=rollup_interval_seconds,
        args=[sessions, pricing, policy],
        id="rollup",
        max_instances=1,
        coalesce=True,
        next_run_time=utc_now(),
    )
    scheduler.add_job(
        budgets.refresh,
        "interval",
        seconds=rollup_interval_seconds,
        args=[sessions],
        id="budgets",
        max_instances=1,
        coalesce=True,
        next_run_time=utc_now(),
    )
    scheduler.start()
    return scheduler
