"""The idle runs found a day at a time from the idle readings, the others read only where they lie among idle ones
(finops/analysis/idle_runs.py), equal those of one window over every reading of the period (the reference, in
Python here: each reading's predecessor and successor in the period, the first reading past it), on three days of
six GPUs read at different cadences, with blips, outages, readings without a utilisation, throttled stretches and
runs across midnight, however the period is cut; and the episodes stored from them equal the reference's runs
clipped to the allocations (time-sliced, still running, of partitions with their own threshold). Both databases; on
PostgreSQL also read by helper connections on the transaction's snapshot."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import pytest
from sqlalchemy import Connection, delete, event, insert, select, text, update
from sqlalchemy.orm import Session, sessionmaker

import finops.analysis.idle as idle_module
from collector.contract.clocks_events import CLOCKS_EVENT_REASONS, POWER_MASK, THERMAL_MASK
from finops.analysis.idle import IDLE_READINGS_TABLE, IdlePolicy, _load_readings, detect_idle, rejudge_idle
from finops.analysis.idle_pieces import IdleRun
from finops.analysis.idle_runs import day_chunks, idle_runs, may_read_elsewhere
from finops.db.models import Allocation, Gpu, GpuSample, IdleEpisode, Job, Node, Team
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.ledger.costmodel import capacity_cost
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import from_epoch, to_epoch

D0 = to_epoch(datetime(2026, 3, 1, tzinfo=UTC))
DAYS = 3
MODEL = "NVIDIA H100 80GB HBM3"
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
Reading = tuple[int, float | None, int | None, int | None, float | None]  # ts, utilisation, memory, clocks, SM clock
CADENCES = ((60, 0), (30, 0), (60, 15), (60, 0), (150, 10), (60, 0))  # seconds between readings, jitter


def fleet_readings(seed: int) -> list[list[Reading]]:
    """Per GPU, its readings over [D0, D0 + DAYS days + 2 h): idle and busy stretches of 5 minutes to 30 hours,
    idle ones with blips of a busy reading, readings at exactly 5 %, outages of 2 to 30 minutes, readings without
    a utilisation, memory held or not, thermal or power clocks-event reasons with a held-down SM clock."""
    rng = random.Random(seed)
    fleet = []
    for cadence, jitter in CADENCES:
        readings: list[Reading] = []
        ts, stretch_end, idle = D0 + rng.randrange(60), D0, False
        memory = clocks = None
        while ts < D0 + DAYS * 86_400 + 7_200:
            if ts >= stretch_end:
                idle = not idle if rng.random() < 0.8 else idle
                stretch_end = ts + rng.choice((300, 1_500, 1_800, 2_400, 5_400, 20_000, 108_000))
                memory = rng.choice((0, 2**31, None)) if idle else 40 * 2**30
                clocks = rng.choice((None, 0, CLOCKS_EVENT_REASONS["sw_thermal"], CLOCKS_EVENT_REASONS["sw_power_cap"]))
            if rng.random() < 0.004:  # an outage
                ts += rng.randrange(120, 1_800)
                continue
            if rng.random() < 0.01:
                utilization: float | None = None
            elif idle:
                utilization = 0.5 if rng.random() < 0.01 else rng.choice((0.0, 0.01, 0.03, 0.05))
            else:
                utilization = rng.choice((0.06, 0.3, 0.9))
            sm = 1.2e9 if clocks else 1.98e9
            readings.append((ts, utilization, memory, clocks, None if rng.random() < 0.02 else sm))
            ts += cadence + (rng.randrange(-jitter, jitter + 1) if jitter else 0)
        fleet.append(readings)
    return fleet


def reference_runs(
    fleet: dict[int, list[Reading]], start: int, end: int, threshold: float, gap: int, window: int
) -> list[tuple[object, ...]]:
    """The runs one window over the period's readings finds: a reading's predecessor and successor among the GPU's
    readings with a utilisation in [start, end) (the successor of the last one: the first such reading at or after
    ``end``); a run starts at a busy reading, at the period's first reading and after a gap
    longer than ``gap``; a reading covers until its successor, at most ``gap`` on, or itself when none follows."""
    found = []
    for gpu_id, readings in fleet.items():
        counted = [r for r in readings if r[1] is not None]
        inside = [r for r in counted if start <= r[0] < end]
        after = next((r[0] for r in counted if r[0] >= end), None)
        runs: dict[int, list[tuple[Reading, int]]] = defaultdict(list)
        run = 0
        for i, reading in enumerate(inside):
            ts, utilization = reading[0], reading[1]
            assert utilization is not None
            previous = inside[i - 1][0] if i else None
            following = inside[i + 1][0] if i + 1 < len(inside) else after
            if utilization > threshold or previous is None or ts - previous > gap:
                run += 1
            if utilization <= threshold:
                covered = ts if following is None else (ts + gap if following - ts > gap else following)
                runs[run].append((reading, covered))
        for members in runs.values():
            first, covered = members[0][0][0], max(c for _, c in members)
            if covered - first < window:
                continue
            clocks = [r[3] or 0 for r, _ in members]
            throttled = [r for r, _ in members if (r[3] or 0) & (THERMAL_MASK | POWER_MASK)]
            clocked = [r[4] for r in throttled if r[4] is not None]
            found.append((
                gpu_id, first, covered, float(max(r[2] or 0 for r, _ in members)), len(members),
                sum(1 for c in clocks if c & THERMAL_MASK), sum(1 for c in clocks if c & POWER_MASK), len(throttled),
                sum(clocked) / len(clocked) if clocked else None,
            ))  # fmt: skip
    return sorted(found)


def as_tuples(runs: list[IdleRun]) -> list[tuple[object, ...]]:
    return sorted(
        (r.gpu_id, r.first_ts, r.covered_until, r.max_mem, r.readings, r.thermal_readings, r.power_readings,
         r.throttled_readings, r.sm_sum / r.sm_n if r.sm_n else None)
        for r in runs
    )  # fmt: skip


def add_fleet_gpus(session: Session) -> list[int]:
    """The fleet's GPUs on one node, in service from D0, and the day partitions of its readings; returns their
    ``gpus.id`` in the order of :data:`CADENCES`."""
    node = Node(hostname="gpu-r-01", partition="batch")
    session.add(node)
    session.flush()
    gpus = [Gpu(uuid=f"GPU-r-{i}", node_id=node.id, gpu_index=i, model=MODEL, in_service_from=from_epoch(D0))
            for i in range(len(CADENCES))]  # fmt: skip
    session.add_all(gpus)
    session.flush()
    connection = session.connection()
    if is_partitioned(connection):
        create_partitions(connection, range(D0, D0 + (DAYS + 1) * 86_400, 86_400))
    return [gpu.id for gpu in gpus]


def store_fleet(session: Session, seed: int) -> dict[int, list[Reading]]:
    """The fleet's GPUs (:func:`add_fleet_gpus`) and their readings; returns the readings by ``gpus.id``."""
    fleet = dict(zip(add_fleet_gpus(session), fleet_readings(seed), strict=True))
    session.execute(
        insert(GpuSample),
        [
            {"gpu_id": gpu_id, "ts": from_epoch(ts), "utilization_ratio": u, "memory_used_bytes": mem,
             "clocks_event_reasons": clk, "sm_clock_hertz": sm}
            for gpu_id, readings in fleet.items() for ts, u, mem, clk, sm in readings
        ],
    )  # fmt: skip
    return fleet


PERIODS = [
    (D0, D0 + DAYS * 86_400),
    (D0 + 7, D0 + DAYS * 86_400 - 5),
    (D0 + 86_400 + 1_234, D0 + 2 * 86_400 + 3),
    (D0 + 40_000, D0 + 50_000),
]


@pytest.mark.parametrize("seed", [1, 2])
def test_idle_runs_equal_one_window_over_every_reading(sessions: sessionmaker[Session], seed: int) -> None:
    with sessions.begin() as session:
        fleet = store_fleet(session, seed)
        for start, end in PERIODS:
            for threshold, gap, window in ((0.05, 150, 1_800), (0.05, 300, 600), (0.3, 150, 1_800)):
                expected = reference_runs(fleet, start, end, threshold, gap, window)
                assert expected, "the fleet has runs in every period"
                found = idle_runs(session.connection(), day_chunks(start, end), threshold, gap, window)
                assert as_tuples(found) == expected, (start, end, threshold, gap, window)
            hours = [(lo, min(lo + 3_600, end)) for lo in range(start, end, 3_600)]
            in_hours = idle_runs(session.connection(), hours, 0.05, 150, 1_800)
            assert as_tuples(in_hours) == reference_runs(fleet, start, end, 0.05, 150, 1_800), "however it is cut"


def test_idle_runs_of_a_tsdb_source_s_readings_however_the_period_is_cut(sessions: sessionmaker[Session]) -> None:
    """The readings of a TSDB (the temporary table IDLE_READINGS_TABLE, no clocks-event reasons): part-day chunks
    (read per GPU by key on PostgreSQL) find the runs whole days and the reference find."""
    with sessions.begin() as session:
        fleet = store_fleet(session, 5)
        tsdb = {g: [(ts, u, mem, None, None) for ts, u, mem, _, _ in rs if u is not None] for g, rs in fleet.items()}
        _load_readings(session, [(g, ts, u, mem) for g, rs in tsdb.items() for ts, u, mem, _, _ in rs])
        connection = session.connection()
        for start, end in PERIODS:
            expected = reference_runs(tsdb, start, end, 0.05, 150, 1_800)
            assert expected, "the fleet has runs in every period"
            hours = [(lo, min(lo + 3_600, end)) for lo in range(start, end, 3_600)]
            for chunks in (day_chunks(start, end), hours):
                found = idle_runs(connection, chunks, 0.05, 150, 1_800, table=IDLE_READINGS_TABLE, clocks=False)
                assert as_tuples(found) == expected, (start, end)


def test_helper_connections_read_the_transactions_snapshot(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        fleet = store_fleet(session, 3)
        connection = session.connection()
        assert not may_read_elsewhere(connection), "readings written here are not committed"
        expected = reference_runs(fleet, *PERIODS[1], 0.05, 150, 1_800)
        assert as_tuples(idle_runs(connection, day_chunks(*PERIODS[1]), 0.05, 150, 1_800, helpers=2)) == expected
        if connection.dialect.name == "postgresql":
            # The connection's row counts are flushed when it goes idle after this commit, not up to 10 s later:
            # until then PostgreSQL counts them in the next transaction's pg_stat_xact_user_tables too.
            connection.execute(text("SELECT pg_stat_force_next_flush()"))
    with sessions.begin() as session:
        connection = session.connection()
        assert may_read_elsewhere(connection), "nothing written here: the helpers read what this transaction reads"
        opened: list[Connection] = []

        def count(helper: Connection) -> None:
            opened.append(helper)

        event.listen(connection.engine, "engine_connect", count)
        try:
            found = idle_runs(connection, day_chunks(*PERIODS[1]), 0.05, 150, 1_800, helpers=2)
        finally:
            event.remove(connection.engine, "engine_connect", count)
        assert as_tuples(found) == expected
        assert opened, "the chunks were read on other connections"
        session.execute(update(Gpu).where(Gpu.id == min(fleet)).values(gpu_index=Gpu.gpu_index))
        assert not may_read_elsewhere(connection), "after a write, never"


def hold_fleet(
    session: Session, fleet: dict[int, list[Reading]], seed: int
) -> list[tuple[Job, tuple[int, int, int | None, str]]]:
    """Jobs holding the fleet's GPUs one after the other from before D0 (some still running at the end), a fifth of
    them time-sliced with another job, of partitions "batch" and "interactive"; returns each job with its holding
    (GPU id, start, end or None, partition)."""
    team = Team(name="t")
    session.add(team)
    session.flush()
    rng = random.Random(seed)
    holdings = []
    for gpu_id in sorted(fleet):
        at = D0 - 3_600
        while at < D0 + DAYS * 86_400:
            length = rng.choice((1_200, 7_200, 40_000, 90_000))
            end = None if at + length > D0 + DAYS * 86_400 else at + length
            partition = rng.choice(("batch", "batch", "interactive"))
            holdings.append((gpu_id, at, end, partition))
            if rng.random() < 0.2:  # time-sliced with another job
                holdings.append((gpu_id, at + 600, None if end is None else end - 600, "batch"))
            at += length + rng.choice((0, 0, 1_800))
    jobs = []
    for number, (_, start, end, partition) in enumerate(holdings):
        job = Job(scheduler="slurm", cluster="c", job_id=str(number), job_id_raw=str(number), user="u",
                  account="a", partition=partition, name="train", state="COMPLETED", start=from_epoch(start),
                  end=None if end is None else from_epoch(end), gpus=1, node_list="gpu-r-01",
                  team_id=team.id)  # fmt: skip
        session.add(job)
        jobs.append(job)
    session.flush()
    session.add_all(
        Allocation(job_pk=job.id, gpu_id=gpu_id, start=from_epoch(start),
                   end=None if end is None else from_epoch(end))
        for job, (gpu_id, start, end, _) in zip(jobs, holdings, strict=True)
    )  # fmt: skip
    return list(zip(jobs, holdings, strict=True))


def test_stored_episodes_are_the_reference_runs_clipped_to_the_allocations(sessions: sessionmaker[Session]) -> None:
    """Allocations: one after the other, two time-sliced on one GPU, one still running, and jobs of a partition
    that calls ≤ 30 % idle; each episode starts no earlier than its allocation's start + the grace, and holds memory
    when its own readings do (not those of its run before or after it)."""
    policy = IdlePolicy(grace_seconds=900, partition_thresholds={"interactive": 0.3})
    with sessions.begin() as session:
        fleet = store_fleet(session, 4)
        held = hold_fleet(session, fleet, 4)
        start, end = PERIODS[1]
        stored = detect_idle(session, from_epoch(start), from_epoch(end), policy, PRICING)
        found = sorted(
            (e.gpu_id, e.job_pk, to_epoch(e.start), to_epoch(e.end), e.memory_held, e.cost)
            for e in session.scalars(select(IdleEpisode))
        )
    runs = {t: reference_runs(fleet, start, end, t, policy.max_gap_seconds, policy.window_seconds) for t in (0.05, 0.3)}
    expected = []
    for job, (gpu_id, a_start, a_end, partition) in held:
        for run in runs[policy.threshold_for(partition)]:
            if run[0] != gpu_id:
                continue
            lo = max(int(run[1]), a_start + policy.grace_seconds)  # type: ignore[call-overload]
            hi = int(run[2]) if a_end is None else min(int(run[2]), a_end)  # type: ignore[call-overload]
            if hi - lo >= policy.window_seconds:
                rate = PRICING.catalog.rate(MODEL, PricingModel.ON_DEMAND, from_epoch(lo))
                own_memory = max(r[2] or 0 for r in fleet[gpu_id] if r[1] is not None and lo <= r[0] < hi)
                expected.append((gpu_id, job.id, lo, hi, own_memory > 64 * 2**20, capacity_cost(rate, hi - lo)))  # type: ignore[arg-type]
    assert stored == len(expected) > 10
    assert found == sorted(expected)


def test_hourly_re_judging_stores_the_episodes_of_one_detection(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduled cycle re-judges the hour each rollup rebuilt (:func:`rejudge_idle`), hour after hour; the
    episodes it leaves equal those of one detection over the whole period. Each GPU's period grows by its own stored
    episodes alone: grown by every GPU's at once, the fleet's overlapping episodes widened every hour's re-judging,
    for every GPU, back to the first reading (a cycle's cost growing with the history kept)."""
    policy = IdlePolicy(grace_seconds=900, partition_thresholds={"interactive": 0.3})
    with sessions.begin() as session:
        hold_fleet(session, store_fleet(session, 4), 4)
    reads: list[tuple[int, int, object]] = []
    original = idle_module.idle_runs

    def recorded(connection: Connection, chunks: Any, *args: Any, **kwargs: Any) -> list[IdleRun]:
        chunks = list(chunks)
        reads.append((chunks[0][0], chunks[-1][1], kwargs.get("only")))
        return original(connection, chunks, *args, **kwargs)

    monkeypatch.setattr(idle_module, "idle_runs", recorded)
    margin = policy.window_seconds + policy.max_gap_seconds
    for hour in range(D0, D0 + DAYS * 86_400, 3_600):
        with sessions.begin() as session:
            rejudge_idle(session, [hour], policy, PRICING)
    every_gpu = [(c0, c1) for c0, c1, only in reads if only is None]
    assert max(c1 - c0 for c0, c1 in every_gpu) == 3_600 + 2 * margin, "every GPU's read is the hour, widened"
    assert any(only for _, _, only in reads), "some GPU's own episodes widened its read"

    def episodes() -> list[tuple[object, ...]]:
        with sessions() as session:
            return sorted(
                (e.gpu_id, e.job_pk, e.start, e.end, e.memory_held, e.cost, e.reason, e.evidence)
                for e in session.scalars(select(IdleEpisode))
            )

    hourly = episodes()
    with sessions.begin() as session:
        session.execute(delete(IdleEpisode))
        detect_idle(session, from_epoch(D0 - margin), from_epoch(D0 + DAYS * 86_400 + margin), policy, PRICING)
    assert len(hourly) > 10
    assert hourly == episodes()


def test_a_raised_threshold_re_judged_over_one_hour_bills_no_time_twice(sessions: sessionmaker[Session]) -> None:
    """Episodes judged hour by hour at 5 %, then the last hour re-judged at 50 %: busy stretches between stored
    episodes now count as idle, so a run found from the day's start reaches back over episodes that the re-judging of
    that hour does not take in (they do not touch the GPU's own period). Those are kept, so what is stored for the
    hour's GPUs is clipped to their periods: no two episodes of one GPU and job overlap."""
    policy = IdlePolicy(grace_seconds=900)
    with sessions.begin() as session:
        hold_fleet(session, store_fleet(session, 4), 4)
    hours = range(D0, D0 + DAYS * 86_400, 3_600)
    for hour in hours:
        with sessions.begin() as session:
            rejudge_idle(session, [hour], policy, PRICING)
    with sessions.begin() as session:
        rejudge_idle(session, [hours[-1]], IdlePolicy(threshold=0.5, grace_seconds=900), PRICING)
    with sessions() as session:
        stored = sorted((e.gpu_id, e.job_pk, e.start, e.end) for e in session.scalars(select(IdleEpisode)))
    overlapping = [(a, b) for a, b in pairwise(stored) if a[:2] == b[:2] and b[2] < a[3]]
    assert len(stored) > 10
    assert overlapping == []
