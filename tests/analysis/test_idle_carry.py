"""The scheduler's 5-minute cycle carries the idle runs it read to the next cycle (finops/analysis/idle_carry.py), which
reads each GPU's readings since then, not the hour again; the episodes it leaves equal one detection over every
reading. The readings of six GPUs read at different cadences (tests/analysis/test_idle_runs.py's fleet) arrive five
minutes at a time over four hours across a UTC midnight, each cycle run by the scheduler (``run_rollup``, its clock
at the 5-minute mark): one GPU's readings arrive 200 s behind (never settled), a quarter of an hour of another's, idle
then, arrives two cycles late in the same hour, and a job is imported an hour after it began. Both databases."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.orm import Session, sessionmaker

import finops.analysis.idle_carry as carry_module
import finops.service.scheduler as scheduler_module
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.analysis.idle_carry import SETTLE_SECONDS
from finops.analysis.idle_pieces import RunPiece
from finops.db.hours import mark_hours_dirty
from finops.db.models import Allocation, GpuSample, IdleEpisode, IdleRunCarry, Job, Team
from finops.ingest.partitions import prune_samples
from finops.ledger.metering_state import arrival_statement
from finops.service.scheduler import run_rollup
from finops.timeutil import HOUR, floor_hour, from_epoch
from tests.analysis.test_idle_runs import D0, PRICING, Reading, add_fleet_gpus, fleet_readings, hold_fleet

T0 = D0 + 86_400 - 2 * HOUR
"""The first cycle's clock: 22:00 of the first day; the cycles run to 02:00."""
T_END = D0 + 86_400 + 2 * HOUR
BEHIND = {3: 200}
"""Seconds behind the cycle's clock each GPU's readings arrive (by its index); 5 s for the others."""
LATE_GPU, LATE_FROM, LATE_UNTIL, LATE_AT = 1, T0 + 75 * 60, T0 + 90 * 60, T0 + 105 * 60
"""Readings of [LATE_FROM, LATE_UNTIL) of one GPU, idle then, arrive at the cycle of LATE_AT, in the same hour, after
cycles that carried its runs past them: its carry is not taken (its metering cursor moved back)."""
IMPORTED_AT = T0 + 150 * 60
"""The cycle before which a job holding the GPUs since T0 + 90 minutes is imported."""
RACED_AT, RACED_GPU, RACED_TS = T0 + 115 * 60, 1, T0 + 97 * 60 + 1
"""At this cycle a busy reading of an idle GPU, earlier than the last cycle's settled instant, is committed between its
rollup and its idle re-judging (as on PostgreSQL, where ingest goes on while a rollup runs): its arrival record,
unsettled, keeps that GPU's carry from being taken."""


def _store(
    session: Session,
    gpu_ids: list[int],
    fleet: list[list[Reading]],
    lo: int,
    hi: int,
    skip: bool,
    only: int | None = None,
) -> None:
    """The readings of [lo, hi) (epoch seconds) of every GPU, or of the GPU of index ``only``, as ingest stores them:
    with each GPU's arrival record and their hours marked dirty; ``skip``: those of the late GPU in [LATE_FROM,
    LATE_UNTIL) are held back."""
    rows, earliest = [], {}
    for index, (gpu_id, readings) in enumerate(zip(gpu_ids, fleet, strict=True)):
        if only is not None and index != only:
            continue
        for ts, u, mem, clk, sm in readings:
            if lo <= ts < hi and not (skip and index == LATE_GPU and LATE_FROM <= ts < LATE_UNTIL):
                rows.append({"gpu_id": gpu_id, "ts": from_epoch(ts), "utilization_ratio": u,
                             "memory_used_bytes": mem, "clocks_event_reasons": clk, "sm_clock_hertz": sm})  # fmt: skip
                earliest[gpu_id] = min(earliest.get(gpu_id, ts), ts)
    if rows:
        session.execute(insert(GpuSample), rows)
        statement = arrival_statement(session.connection().dialect.name, earliest)
        assert statement is not None
        session.connection().exec_driver_sql(statement)
        mark_hours_dirty(session, {floor_hour(int(r["ts"].timestamp())) for r in rows})


def _arrived(index: int, until: int) -> int:
    """Up to when the GPU of ``index``'s readings have arrived at the cycle of ``until``."""
    return until - BEHIND.get(index, 5)


def test_carried_cycles_store_the_episodes_of_one_detection(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each cycle from 22:00 to 02:00, with a carry, leaves the episodes one detection over every reading stored
    stores (reasons, evidence and costs too), although no read of every GPU reaches back further than the cycle
    before's settled instant, the first cycles of an hour included (their periods end, then start, an hour later)."""
    policy = IdlePolicy(grace_seconds=900, partition_thresholds={"interactive": 0.3})
    fleet = fleet_readings(5)
    with sessions.begin() as session:
        gpu_ids = add_fleet_gpus(session)
        hold_fleet(session, {gpu_id: [] for gpu_id in gpu_ids}, 5)
        _store(session, gpu_ids, fleet, 0, T0 - 5, skip=False)
    reads: list[tuple[int, int, int, object]] = []
    original = carry_module.run_pieces

    def recorded(connection: Connection, chunks: Any, *args: Any, **kwargs: Any) -> list[RunPiece]:
        chunks = list(chunks)
        reads.append((clock[0], chunks[0][0], chunks[-1][1], kwargs.get("only")))
        return original(connection, chunks, *args, **kwargs)

    clock = [T0]
    rejudge = scheduler_module.rejudge_idle

    def raced(session: Session, *args: Any, **kwargs: Any) -> int:
        if clock[0] == RACED_AT:
            session.execute(insert(GpuSample), [{"gpu_id": gpu_ids[RACED_GPU], "ts": from_epoch(RACED_TS),
                                                 "utilization_ratio": 0.9}])  # fmt: skip
            statement = arrival_statement(session.connection().dialect.name, {gpu_ids[RACED_GPU]: RACED_TS})
            assert statement is not None
            session.connection().exec_driver_sql(statement)
        return rejudge(session, *args, **kwargs)

    monkeypatch.setattr(scheduler_module, "rejudge_idle", raced)
    monkeypatch.setattr(carry_module, "run_pieces", recorded)
    monkeypatch.setattr(scheduler_module, "utc_now", lambda: from_epoch(clock[0]))
    arrived = {index: T0 - 5 for index in range(len(gpu_ids))}
    stored = 0
    for until in range(T0, T_END + 1, 300):
        clock[0] = until
        with sessions.begin() as session:
            for index in range(len(gpu_ids)):
                upto = _arrived(index, until)
                _store(session, gpu_ids, fleet, arrived[index], upto, skip=until < LATE_AT, only=index)
                arrived[index] = max(arrived[index], upto)
            if until == LATE_AT:
                _store(session, gpu_ids, fleet, LATE_FROM, LATE_UNTIL, skip=False, only=LATE_GPU)
            if until == IMPORTED_AT:
                _import_job(session, gpu_ids, T0 + 90 * 60)
        run_rollup(sessions, PRICING, policy)
        with sessions() as session:
            carried = _episodes(session)
        assert carried == _one_detection(sessions, policy, until), f"at {from_epoch(until)}"
        stored = max(stored, len(carried))
    with sessions.begin() as session:
        assert session.scalar(select(IdleRunCarry.lo).limit(1)) is not None, "the last cycle left a carry"
        prune_samples(session, 1, from_epoch(T_END + 86_400))  # readings expire: their runs may be carried
        assert session.scalar(select(IdleRunCarry.lo).limit(1)) is None, "expiring readings drop the carries"

    # Read whole: the first cycle, and the one after the job import (earlier hours rebuilt: a period starting earlier).
    whole = {T0, IMPORTED_AT}
    steady = [(at, c0, c1) for at, c0, c1, only in reads if only is None and at not in whole]
    assert steady, "cycles read every GPU"
    assert all(c0 >= at - 300 - SETTLE_SECONDS for at, c0, _ in steady), "every GPU's read starts at the last settled"
    assert stored > 10


def _episodes(session: Session) -> list[tuple[object, ...]]:
    """The stored idle episodes, with their costs, reasons and evidence."""
    return sorted(
        (e.gpu_id, e.job_pk, e.start, e.end, e.memory_held, e.cost, e.reason, e.evidence)
        for e in session.scalars(select(IdleEpisode))
    )


def _one_detection(sessions: sessionmaker[Session], policy: IdlePolicy, until: int) -> list[tuple[object, ...]]:
    """The episodes one detection over every reading stored up to ``until`` stores, in a transaction rolled back."""
    margin = policy.window_seconds + policy.max_gap_seconds
    with sessions() as session:
        session.execute(delete(IdleEpisode))
        detect_idle(session, from_epoch(D0 - margin), from_epoch(until + margin), policy, PRICING)
        found = _episodes(session)
        session.rollback()
    return found


def _import_job(session: Session, gpu_ids: list[int], start: int) -> None:
    """A job of partition "interactive" holding every GPU from ``start`` on, time-sliced with the others, imported
    now: its hours marked dirty, as a job import marks them."""
    job = Job(scheduler="slurm", cluster="c", job_id="late", job_id_raw="late", user="u", account="a",
              partition="interactive", name="notebook", state="RUNNING", start=from_epoch(start), end=None, gpus=6,
              node_list="gpu-r-01", team_id=session.scalar(select(Team.id)))  # fmt: skip
    session.add(job)
    session.flush()
    session.add_all(Allocation(job_pk=job.id, gpu_id=gpu_id, start=from_epoch(start), end=None) for gpu_id in gpu_ids)
    mark_hours_dirty(session, range(floor_hour(start), T_END, HOUR))
