"""An idle episode's waste reason and evidence come from its own readings, not from the rest of the idle run it was
clipped from (finops/analysis/idle.py: ``_held_runs`` clips a run to each allocation; ``detect_idle`` judges the
episode). Both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, select
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.idle import IdlePolicy, detect_idle
from finops.analysis.waste import STALLED_PROCESS
from finops.db.models import Allocation, Gpu, GpuSample, IdleEpisode, Job, Node, Team
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch, to_epoch

T0 = to_epoch(datetime(2026, 3, 2, 7, tzinfo=UTC))
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
HELD_BYTES = 20 * 2**30


def _job(session: Session, team: Team, job_id: str, start: int, end: int, gpu_id: int) -> Job:
    job = Job(scheduler="slurm", cluster="c", job_id=job_id, job_id_raw=job_id, user="u", account="a",
              partition="batch", name="train", state="COMPLETED", start=from_epoch(start), end=from_epoch(end),
              gpus=1, node_list="gpu-e-01", team_id=team.id)  # fmt: skip
    session.add(job)
    session.flush()
    session.add(Allocation(job_pk=job.id, gpu_id=gpu_id, start=from_epoch(start), end=from_epoch(end)))
    return job


@pytest.mark.xfail(
    strict=True,
    reason="an episode takes the evidence of its whole idle run (memory, readings, clocks-event reasons), also of "
    "the readings before its allocation began: job B is judged a stalled process on job A's memory",
)
def test_an_episode_is_judged_on_its_own_readings_not_its_predecessor_s(sessions: sessionmaker[Session]) -> None:
    """One GPU at 0 % from 08:00 to 11:00, read every minute: job A [07:00, 09:00) holds 20 GiB while idle (a
    stalled process), job B [09:00, 11:00) holds none. The readings make one idle run; B's episode
    [09:10, 11:00) must not be a stalled process, nor say memory held."""
    with sessions.begin() as session:
        team = Team(name="t")
        node = Node(hostname="gpu-e-01", partition="batch")
        session.add_all([team, node])
        session.flush()
        gpu = Gpu(uuid="GPU-e-0", node_id=node.id, gpu_index=0, model="NVIDIA H100 80GB HBM3",
                  in_service_from=from_epoch(T0))  # fmt: skip
        session.add(gpu)
        session.flush()
        if is_partitioned(session.connection()):
            create_partitions(session.connection(), [T0 - T0 % 86_400])
        readings = [
            {"gpu_id": gpu.id, "ts": from_epoch(ts), "utilization_ratio": 0.0,
             "memory_used_bytes": HELD_BYTES if ts < T0 + 2 * HOUR else 0}
            for ts in range(T0 + HOUR, T0 + 4 * HOUR, 60)
        ]  # fmt: skip
        session.execute(insert(GpuSample), readings)
        a = _job(session, team, "a", T0, T0 + 2 * HOUR, gpu.id)
        b = _job(session, team, "b", T0 + 2 * HOUR, T0 + 4 * HOUR, gpu.id)
        detect_idle(session, from_epoch(T0), from_epoch(T0 + 4 * HOUR), IdlePolicy(), PRICING)
        episodes = {e.job_pk: e for e in session.scalars(select(IdleEpisode))}
    assert set(episodes) == {a.id, b.id}
    assert (episodes[a.id].memory_held, episodes[a.id].reason) == (True, STALLED_PROCESS)
    assert not episodes[b.id].memory_held
    assert episodes[b.id].reason != STALLED_PROCESS, episodes[b.id].evidence
