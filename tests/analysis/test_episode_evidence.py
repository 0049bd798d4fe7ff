"""An idle episode's waste reason and evidence come from its own readings, not from the rest of the idle run it was
clipped from (finops/analysis/episode_evidence.py; ``finops.analysis.idle._held_runs`` clips a run to each
allocation). One GPU read every minute at 0 %, two jobs one after the other on it: the readings make one idle run
across both. Both databases."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Connection, insert, select
from sqlalchemy.orm import Session, sessionmaker

import finops.analysis.episode_evidence as evidence_module
import finops.analysis.idle as idle_module
from collector.contract.clocks_events import CLOCKS_EVENT_REASONS, POWER_MASK, THERMAL_MASK
from finops.analysis.episode_evidence import Evidence, episode_evidence
from finops.analysis.idle import IdlePolicy, detect_idle, rejudge_idle
from finops.analysis.idle_pieces import IdleRun
from finops.analysis.waste import STALLED_PROCESS, THROTTLED
from finops.db.models import Allocation, Gpu, GpuSample, IdleEpisode, Job, Node, Team
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.analysis.test_idle_runs import D0, PERIODS, hold_fleet, store_fleet

T0 = to_epoch(datetime(2026, 3, 2, 7, tzinfo=UTC))
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
HELD_BYTES = 20 * 2**30
STALLED = (True, STALLED_PROCESS, "20.0 GiB of GPU memory held with no compute")
FULL_CLOCK, HELD_DOWN_CLOCK = 1.98e9, 1.2e9


@dataclass(frozen=True)
class Stretch:
    """Readings every minute over [start, end) epoch seconds: utilisation, memory in use, a clocks-event reason."""

    start: int
    end: int
    memory: int = 0
    clocks: int = 0
    utilization: float = 0.0


def _judged(
    sessions: sessionmaker[Session], stretches: list[Stretch], jobs: list[tuple[int, int]]
) -> list[IdleEpisode]:
    """The GPU's ``stretches`` of readings and ``jobs`` ([start, end) epoch seconds) held on it, judged by one
    detection over [T0, T0 + 4 h); returns each job's one episode, in the jobs' order."""
    with sessions.begin() as session:
        team, node = Team(name="t"), Node(hostname="gpu-e-01", partition="batch")
        session.add_all([team, node])
        session.flush()
        gpu = Gpu(uuid="GPU-e-0", node_id=node.id, gpu_index=0, model="NVIDIA H100 80GB HBM3",
                  in_service_from=from_epoch(T0))  # fmt: skip
        session.add(gpu)
        session.flush()
        if is_partitioned(session.connection()):
            create_partitions(session.connection(), [T0 - T0 % 86_400])
        session.execute(
            insert(GpuSample),
            [
                {"gpu_id": gpu.id, "ts": from_epoch(ts), "utilization_ratio": s.utilization,
                 "memory_used_bytes": s.memory,
                 "clocks_event_reasons": s.clocks, "sm_clock_hertz": HELD_DOWN_CLOCK if s.clocks else FULL_CLOCK}
                for s in stretches for ts in range(s.start, s.end, 60)
            ],
        )  # fmt: skip
        pks = []
        for number, (start, end) in enumerate(jobs):
            job = Job(scheduler="slurm", cluster="c", job_id=str(number), job_id_raw=str(number), user="u",
                      account="a", partition="batch", name="train", state="COMPLETED", start=from_epoch(start),
                      end=from_epoch(end), gpus=1, node_list="gpu-e-01", team_id=team.id)  # fmt: skip
            session.add(job)
            session.flush()
            session.add(Allocation(job_pk=job.id, gpu_id=gpu.id, start=from_epoch(start), end=from_epoch(end)))
            pks.append(job.id)
        detect_idle(session, from_epoch(T0), from_epoch(T0 + 4 * HOUR), IdlePolicy(), PRICING)
        episodes = {e.job_pk: e for e in session.scalars(select(IdleEpisode))}
        session.expunge_all()
    assert sorted(episodes) == sorted(pks), "one episode per job"
    return [episodes[pk] for pk in pks]


def test_an_episode_is_not_judged_on_the_memory_of_the_job_before(sessions: sessionmaker[Session]) -> None:
    """Job A [07:00, 09:00) holds 20 GiB while idle from 08:00 (a stalled process); job B [09:00, 11:00) holds none.
    B's episode [09:10, 11:00) is no stalled process and holds no memory; A's is, with its 20 GiB (its run's most
    memory, which B's readings clipped off it do not hold)."""
    a, b = _judged(
        sessions,
        [Stretch(T0 + HOUR, T0 + 2 * HOUR, memory=HELD_BYTES), Stretch(T0 + 2 * HOUR, T0 + 4 * HOUR)],
        [(T0, T0 + 2 * HOUR), (T0 + 2 * HOUR, T0 + 4 * HOUR)],
    )
    assert (a.memory_held, a.reason, a.evidence) == (
        True,
        STALLED_PROCESS,
        "20.0 GiB of GPU memory held with no compute",
    )
    assert not b.memory_held
    assert b.reason != STALLED_PROCESS, b.evidence


def test_an_episode_holding_less_memory_than_the_job_before_says_its_own(sessions: sessionmaker[Session]) -> None:
    """Job A [07:00, 09:00) holds 20 GiB idle from 08:00, job B [09:00, 11:00) 1 GiB: B's episode is a stalled process
    on its own 1 GiB (its readings read for their most memory, none holding the run's 20 GiB)."""
    a, b = _judged(
        sessions,
        [Stretch(T0 + HOUR, T0 + 2 * HOUR, memory=HELD_BYTES), Stretch(T0 + 2 * HOUR, T0 + 4 * HOUR, memory=2**30)],
        [(T0, T0 + 2 * HOUR), (T0 + 2 * HOUR, T0 + 4 * HOUR)],
    )
    assert (a.memory_held, a.reason, a.evidence) == STALLED
    assert (b.memory_held, b.reason) == (True, STALLED_PROCESS)
    assert b.evidence == "1.0 GiB of GPU memory held with no compute"


def test_memory_held_all_along_is_not_read_again_over_the_episode(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job E [07:00, 11:00) holds 20 GiB idle from its first reading: its episode [07:10, 11:00) is clipped from its
    run by the grace, whose readings hold the run's most memory. One of the episode's own readings holding as much
    tells that it holds it too (a probe): its readings are not read again to find it."""
    read: list[tuple[int, int]] = []
    original = evidence_module._range_sums

    def recorded(connection: Connection, ranges: list[dict[str, Any]], table: str, clocks: bool) -> Any:
        read.extend((r["lo"], r["hi"]) for r in ranges)
        return original(connection, ranges, table, clocks)

    monkeypatch.setattr(evidence_module, "_range_sums", recorded)
    [e] = _judged(sessions, [Stretch(T0, T0 + 4 * HOUR, memory=HELD_BYTES)], [(T0, T0 + 4 * HOUR)])
    assert (e.memory_held, e.reason, e.evidence) == (
        True,
        STALLED_PROCESS,
        "20.0 GiB of GPU memory held with no compute",
    )
    assert read == [(T0, T0 + 600 - 1)], "only the grace's readings, to take them off the run's"


def test_an_episode_counts_only_its_own_throttled_readings(sessions: sessionmaker[Session]) -> None:
    """Job C [07:00, 09:30) idle and thermally throttled (its SM clock held down to 1.2 GHz from the 1.98 GHz of the
    busy hour before); job D [09:30, 10:30) idle at the full clock, no reason. Over the whole run 150 of 210 readings
    are throttled, which would make D throttled too; D's own readings have none, C's all of theirs (the 140 of
    [07:10, 09:30): not D's 60 after them, the last one included, which the run's end is)."""
    thermal = CLOCKS_EVENT_REASONS["sw_thermal"]
    c, d = _judged(
        sessions,
        [
            Stretch(T0 - HOUR, T0, utilization=0.9),
            Stretch(T0, T0 + 150 * 60, clocks=thermal),
            Stretch(T0 + 150 * 60, T0 + 210 * 60),
        ],
        [(T0, T0 + 150 * 60), (T0 + 150 * 60, T0 + 210 * 60)],
    )
    assert c.reason == THROTTLED
    assert "100%" in c.evidence.replace(" ", ""), c.evidence
    assert d.reason != THROTTLED, d.evidence


def test_every_episode_s_evidence_is_that_of_its_own_readings(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The random fleet of test_idle_runs.py (six GPUs at different cadences, busy and idle stretches, outages, memory
    held or not, throttled stretches; allocations one after the other, time-sliced, still running, a partition with
    its own threshold), judged by one detection, by periods that cut runs at both ends (readings past a period's end
    idle), and hour by hour as the scheduler re-judges: every episode's evidence equals the sums of the readings of
    its run that it holds, counted from the readings themselves (at or below its threshold, from its start, before its
    end, or up to the run's last reading when it reaches the run's end)."""
    policy = IdlePolicy(grace_seconds=900, partition_thresholds={"interactive": 0.3})
    seen: list[tuple[list[tuple[IdleRun, float, int, int]], list[Evidence]]] = []

    def recorded(connection: Connection, episodes: Any, table: str, clocks: bool) -> list[Evidence]:
        found = episode_evidence(connection, episodes, table, clocks)
        seen.append((list(episodes), found))
        return found

    monkeypatch.setattr(idle_module, "episode_evidence", recorded)
    with sessions.begin() as session:
        fleet = store_fleet(session, 4)
        hold_fleet(session, fleet, 4)
    for start, end in PERIODS:
        with sessions.begin() as session:
            detect_idle(session, from_epoch(start), from_epoch(end), policy, PRICING)
            session.rollback()
    with sessions.begin() as session:
        for hour in range(D0 + 20 * 3_600, D0 + 40 * 3_600, 3_600):
            rejudge_idle(session, [hour], policy, PRICING)
    checked = clipped = 0
    for episodes, found in seen:
        for (run, threshold, lo, hi), evidence in zip(episodes, found, strict=True):
            own = [r for r in fleet[run.gpu_id] if r[1] is not None and r[1] <= threshold and lo <= r[0] <= run.last_ts
                   and (r[0] < hi or hi >= run.covered_until)]  # fmt: skip
            throttled = [r for r in own if (r[3] or 0) & (THERMAL_MASK | POWER_MASK)]
            clocks = [r[4] for r in throttled if r[4] is not None]
            expected = Evidence(
                float(max(r[2] or 0 for r in own)), len(own), sum(1 for r in own if (r[3] or 0) & THERMAL_MASK),
                sum(1 for r in own if (r[3] or 0) & POWER_MASK), len(throttled),
                sum(clocks) / len(clocks) if clocks else None,
            )  # fmt: skip
            assert evidence == expected, (run, lo, hi)
            checked += 1
            clipped += len(own) < run.readings
    assert checked > 500 and clipped > 50, (checked, clipped)
