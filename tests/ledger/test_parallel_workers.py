"""The 5-minute cycle beside ingest takes no parallel workers on PostgreSQL; a backlog of many hours does.

The cycle's rollup of its one open hour and its idle re-judging of that hour run while collectors POST: workers on
every core would hold up those POSTs to shorten a statement. A rollup of a day (a cold start, a dirty day) meters
with parallel workers priced in (:func:`finops.ledger.sql.statement_settings`). What is checked is the setting in
force while each statement that reads ``gpu_samples`` runs, read on the same PostgreSQL session."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from finops.analysis.idle_runs import idle_runs
from finops.db.engine import make_engine, upgrade
from finops.db.models import Gpu, GpuSample, Node
from finops.ingest.partitions import create_partitions
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch
from tests.conftest import reset_postgres

T0 = 1_790_812_800  # 2026-10-01T00:00Z
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
READS_SAMPLES = re.compile(r"\b(FROM|JOIN)\s+gpu_samples\b", re.IGNORECASE)
Settings = tuple[str, str]  # (max_parallel_workers_per_gather, parallel_setup_cost)


@pytest.fixture
def engine(postgres_run_url: str) -> Iterator[Engine]:
    """A migrated PostgreSQL database with one H100 in service from T0, read every minute for 30 hours."""
    reset_postgres(postgres_run_url)
    created = make_engine(postgres_run_url)
    upgrade(created)
    with Session(created) as session, session.begin():
        node = Node(hostname="n1")
        session.add(node)
        session.flush()
        gpu = Gpu(
            uuid="GPU-a", node_id=node.id, gpu_index=0, model="NVIDIA H100 80GB HBM3", in_service_from=from_epoch(T0)
        )
        session.add(gpu)
        session.flush()
        create_partitions(session.connection(), {T0, T0 + 30 * HOUR})
        session.execute(
            GpuSample.__table__.insert(),  # type: ignore[attr-defined]
            [{"gpu_id": gpu.id, "ts": ts, "utilization_ratio": 0.0} for ts in range(T0, T0 + 30 * HOUR, 60)],
        )
    yield created
    created.dispose()


def _settings_reading_samples(engine: Engine) -> tuple[list[Settings], Any]:
    """A list that fills, for each statement reading ``gpu_samples``, with the settings in force as it ran (read on
    its own session by the driver, outside SQLAlchemy's events), and the listener to remove afterwards."""
    seen: list[Settings] = []

    def after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if READS_SAMPLES.search(statement):
            row = cursor.connection.execute(
                "SELECT current_setting('max_parallel_workers_per_gather'), current_setting('parallel_setup_cost')"
            ).fetchone()
            seen.append((row[0], row[1]))

    event.listen(engine, "after_cursor_execute", after)
    return seen, after


def test_the_cycles_rollup_of_its_open_hour_takes_no_workers_and_a_days_backlog_does(engine: Engine) -> None:
    seen, listener = _settings_reading_samples(engine)
    try:
        with Session(engine) as session, session.begin():
            rollup(session, PRICING, T0 + 24 * HOUR, connections=1)
        backlog = list(seen)
        seen.clear()
        with Session(engine) as session, session.begin():
            rollup(session, PRICING, T0 + 24 * HOUR + 300, connections=1)
        cycle = list(seen)
    finally:
        event.remove(engine, "after_cursor_execute", listener)
    assert backlog and cycle, "no statement read gpu_samples"
    assert all(workers != "0" and setup == "0" for workers, setup in backlog), backlog
    assert all(workers == "0" for workers, _ in cycle), cycle


def test_idle_runs_of_the_cycles_hour_take_no_workers_and_those_of_a_day_do(engine: Engine) -> None:
    seen, listener = _settings_reading_samples(engine)
    try:
        with engine.connect() as connection:
            whole_day = idle_runs(connection, [(T0, T0 + 24 * HOUR)], 0.05, 120, 600)
            day = list(seen)
            seen.clear()
            open_hour = idle_runs(connection, [(T0 + 24 * HOUR, T0 + 24 * HOUR + 300)], 0.05, 120, 60)
            hour = list(seen)
    finally:
        event.remove(engine, "after_cursor_execute", listener)
    assert [run.first_ts for run in whole_day] == [T0]
    assert len(open_hour) == 1
    assert day and hour, "no statement read gpu_samples"
    assert all(workers != "0" for workers, _ in day), day
    assert all(workers == "0" for workers, _ in hour), hour
