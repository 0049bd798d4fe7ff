"""Handing the job leases over between two real ``gpu-finops scheduler`` processes on PostgreSQL, with a rollup
interval far longer than the test: a holder stopped by SIGTERM ends its leases as it exits (the lease row's expiry is
the database's now, not a lease ahead), so the other process takes the rollup's lease at its next renewal, before the
lease would have expired; a holder killed with SIGKILL is replaced once its lease expires. Either way the new holder
runs the rollup as soon as it takes the lease, not at its own next interval."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from finops.db.engine import make_engine
from tests.support.servers import scheduler_process

pytestmark = pytest.mark.slow

ROLLUP_INTERVAL_SECONDS = 3600
"""Far beyond every wait of these tests: a rollup seen after the first is one run because of a takeover."""


def _wait_for(condition: Callable[[], Any], what: str, timeout: float) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)
    return found


def _rollup_lease(engine: Engine) -> tuple[int | None, bool]:
    """(the process id in the rollup lease's holder name, None before anyone took it; whether the lease has ended
    in the database's clock)."""
    with engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT holder, expires_at <= extract(epoch FROM clock_timestamp()) FROM job_leases "
                "WHERE name = 'rollup'"
            )
        ).first()
    return (None, True) if row is None else (int(row[0].split(":")[-2]), bool(row[1]))


def _rollups_logged(log: Path) -> int:
    """How many rollups the scheduler writing ``log`` finished ("rollup: N ledger hours rebuilt"; not the line that
    announces a run, which would make the count pass 1 before the test sees it)."""
    return len(
        re.findall(r"finops\.service\.scheduler: rollup: \d+ ledger hours rebuilt", log.read_text(errors="replace"))
    )


@pytest.fixture
def schedulers(database_url: str, tmp_path: Path) -> Iterator[Callable[[int], tuple[list[Any], list[Path], Engine]]]:
    """Start two schedulers on ``database_url`` with leases of the given seconds, the first holding every lease
    before the second starts; gives (processes, their log files, an engine on the database)."""
    with ExitStack() as stack:

        def start(lease_seconds: int) -> tuple[list[Any], list[Path], Engine]:
            base = {k: v for k, v in os.environ.items() if not k.startswith("FINOPS_")}
            env = {
                **base,
                "FINOPS_DATABASE_URL": database_url,
                "FINOPS_JOB_LEASE_SECONDS": str(lease_seconds),
                "FINOPS_ROLLUP_INTERVAL_SECONDS": str(ROLLUP_INTERVAL_SECONDS),
                "FINOPS_SACCT_SCHEDULE_SECONDS": "0",  # sacct may be on the PATH (a live Slurm's client)
            }
            upgrade = [sys.executable, "-m", "finops.cli", "db", "upgrade"]
            subprocess.run(upgrade, env=env, capture_output=True, check=True, timeout=120)
            engine = make_engine(database_url)
            stack.callback(engine.dispose)
            logs = [tmp_path / "scheduler-0.log", tmp_path / "scheduler-1.log"]
            first = stack.enter_context(scheduler_process(env, logs[0]))
            _wait_for(lambda: _rollup_lease(engine)[0] == first.pid, "the first scheduler holding the lease", 30)
            _wait_for(lambda: _rollups_logged(logs[0]) == 1, "the first scheduler's rollup at start", 60)
            second = stack.enter_context(scheduler_process(env, logs[1]))
            skipped = "rollup: skipped, another scheduler holds its lease"
            _wait_for(lambda: skipped in logs[1].read_text(), "the second scheduler skipping the rollup", 60)
            return [first, second], logs, engine

        yield start


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_sigterm_hands_the_leases_over_at_once(schedulers) -> None:  # type: ignore[no-untyped-def]
    lease_seconds = 30
    (first, second), logs, engine = schedulers(lease_seconds)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    assert _rollup_lease(engine) == (first.pid, True), "released on the way out, not left to expire"
    taken_within = lease_seconds / 3 + 5  # the other's next renewal; the lease would have run for 30 s more
    _wait_for(lambda: _rollup_lease(engine)[0] == second.pid, "the lease taken by the other scheduler", taken_within)
    _wait_for(lambda: _rollups_logged(logs[1]) == 1, "the new holder's rollup right after the takeover", 30)
    assert "rollup: lease taken over from" in logs[1].read_text()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_after_sigkill_the_new_holder_rolls_up_as_soon_as_it_takes_the_lease(schedulers) -> None:  # type: ignore[no-untyped-def]
    lease_seconds = 6
    (first, second), logs, engine = schedulers(lease_seconds)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert _rollup_lease(engine)[0] == first.pid, "a killed holder releases nothing"
    taken_within = lease_seconds * 4 / 3 + 10  # expiry, then the other's next renewal
    _wait_for(lambda: _rollup_lease(engine)[0] == second.pid, "the lease taken after its expiry", taken_within)
    _wait_for(lambda: _rollups_logged(logs[1]) == 1, "the new holder's rollup right after the takeover", 30)
