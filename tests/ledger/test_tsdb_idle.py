"""Idle episodes judged on readings read from a real VictoriaMetrics equal those judged on the same readings in
``gpu_samples``: start and end within one step (60 s), the same job, memory flag and cost to the cent."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.idle import IdlePolicy, detect_idle
from finops.db.models import GpuSample, IdleEpisode
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.timeutil import to_epoch
from tests.ledger.test_tsdb_metering import PRICING, day_readings, exposition, seed_day
from tests.support import scenario
from tests.support.environment import debian_binary
from tests.support.prometheus_server import import_prometheus, victoria_metrics

STEP = 60


@pytest.fixture
def vm_url(tmp_path: Path) -> Iterator[str]:
    with victoria_metrics(debian_binary("victoria-metrics"), tmp_path) as url:
        yield url


def episodes(session: Session) -> list[tuple[int, int, int, int, bool, Decimal | None]]:
    """(GPU, job, start, end, memory held, cost to the cent) of the stored episodes, in order."""
    return sorted(
        (e.gpu_id, e.job_pk, to_epoch(e.start), to_epoch(e.end), e.memory_held,
         None if e.cost is None else Decimal(e.cost).quantize(Decimal("0.01")))
        for e in session.scalars(select(IdleEpisode))
    )  # fmt: skip


def test_idle_episodes_from_victoria_metrics_equal_the_direct_path(
    sessions: sessionmaker[Session], vm_url: str
) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    readings = day_readings(t0)
    import_prometheus(vm_url, exposition(readings, "gpu-d-01"))
    policy = IdlePolicy(window_seconds=1200, grace_seconds=300)
    with sessions.begin() as session:
        seed_day(session, t0, readings, [(0, 35, 350), (0, 350, 725), (1, 320, None), (2, 0, 1000)])
        start, end = t0 + timedelta(hours=4), t0 + timedelta(hours=8)
        assert detect_idle(session, start, end, policy, PRICING) > 0
        direct = episodes(session)
        session.execute(delete(IdleEpisode))
        session.execute(delete(GpuSample))
        assert detect_idle(session, start, end, policy, PRICING, TsdbTelemetry(PrometheusClient(vm_url))) == len(direct)
        assert session.scalar(select(func.count()).select_from(GpuSample)) == 0
        metered = episodes(session)
    assert len(metered) == len(direct)
    for ours, theirs in zip(metered, direct, strict=True):
        assert ours[:2] == theirs[:2] and ours[4:] == theirs[4:]
        assert abs(ours[2] - theirs[2]) <= STEP and abs(ours[3] - theirs[3]) <= STEP
