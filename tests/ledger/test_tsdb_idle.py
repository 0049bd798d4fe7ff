"""Idle episodes judged on readings read from a real VictoriaMetrics or Prometheus equal those judged on the same
readings in ``gpu_samples``: start and end within one step (60 s), the same job, memory flag and cost to the cent;
the readings read are those of the half-open period, each in the second the database puts it in."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.db.models import Gpu, GpuSample, IdleEpisode
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.timeutil import to_epoch
from tests.ledger.test_tsdb_metering import PRICING, day_readings, exposition, seed_day
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

STEP = 60


def episodes(session: Session) -> list[tuple[int, int, int, int, bool, Decimal | None]]:
    """(GPU, job, start, end, memory held, cost to the cent) of the stored episodes, in order."""
    return sorted(
        (e.gpu_id, e.job_pk, to_epoch(e.start), to_epoch(e.end), e.memory_held,
         None if e.cost is None else Decimal(e.cost).quantize(Decimal("0.01")))
        for e in session.scalars(select(IdleEpisode))
    )  # fmt: skip


def test_idle_episodes_from_the_tsdb_equal_the_direct_path(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    readings = day_readings(t0)
    url = tsdb(exposition(readings, "gpu-d-01"))
    policy = IdlePolicy(window_seconds=1200, grace_seconds=300)
    with sessions.begin() as session:
        seed_day(session, t0, readings, [(0, 35, 350), (0, 350, 725), (1, 320, None), (2, 0, 1000)])
        start, end = t0 + timedelta(hours=4), t0 + timedelta(hours=8)
        assert detect_idle(session, start, end, policy, PRICING) > 0
        direct = episodes(session)
        session.execute(delete(IdleEpisode))
        session.execute(delete(GpuSample))
        assert detect_idle(session, start, end, policy, PRICING, TsdbTelemetry(PrometheusClient(url))) == len(direct)
        assert session.scalar(select(func.count()).select_from(GpuSample)) == 0
        metered = episodes(session)
    assert len(metered) == len(direct)
    for ours, theirs in zip(metered, direct, strict=True):
        assert ours[:2] == theirs[:2] and ours[4:] == theirs[4:]
        assert abs(ours[2] - theirs[2]) <= STEP and abs(ours[3] - theirs[3]) <= STEP


@pytest.mark.parametrize(
    ("minutes", "threshold"),
    [((30, 150), 1.0), ((30, 60), 0.0)],
    ids=["every-gpu", "only-gpu-2-reads-0"],
)
def test_idle_readings_are_the_tsdb_readings_of_the_half_open_period(
    sessions: sessionmaker[Session], tsdb: TsdbLoader, minutes: tuple[int, int], threshold: float
) -> None:
    """Of the GPUs that read at or below the threshold in the period: all three at 100 %; at 0 %, from 00:30 to
    01:00 only GPU 2 (at 00:54; GPU 0 reads 0 % at 00:00 and 01:41, GPU 1 at 00:27 and 02:08)."""
    t0 = scenario.start_hour() - timedelta(days=2)
    # Stamped 0.3 s before each minute, as Prometheus stamps scrapes (to the millisecond): a reading counts in the
    # second its time falls in, as the database stores it.
    readings = [replace(s, timestamp=s.timestamp - timedelta(milliseconds=300)) for s in day_readings(t0)]
    url = tsdb(exposition(readings, "gpu-d-01"))
    # Both ends 0.3 s after readings.
    start, end = (to_epoch(t0 + timedelta(minutes=minute)) for minute in minutes)
    with sessions.begin() as session:
        seed_day(session, t0, readings, [])
        by_uuid = {gpu.uuid: gpu.id for gpu in session.scalars(select(Gpu))}
        found = TsdbTelemetry(PrometheusClient(url)).idle_readings(session, start, end, threshold)
    period = [s for s in readings if start <= to_epoch(s.timestamp) < end]
    low = {s.labels["uuid"] for s in period if s.values[m.GPU_UTILIZATION] <= threshold}
    assert len(low) == (3 if threshold else 1)
    expected = sorted(
        (by_uuid[s.labels["uuid"]], to_epoch(s.timestamp), s.values[m.GPU_UTILIZATION], s.values[m.GPU_MEMORY_USED])
        for s in period
        if s.labels["uuid"] in low
    )
    assert [row[:2] for row in found] == [row[:2] for row in expected]
    values = [value for row in found for value in row[2:]]
    assert values == pytest.approx([value for row in expected for value in row[2:]], abs=1e-9)
