"""GPUs found in a real VictoriaMetrics (``FINOPS_TELEMETRY_SOURCE=tsdb``): registered with their node, index, model
and UUID from the series' labels and entering service at their first reading; the scheduler's rollup then builds
the ledger from the TSDB with no row in ``gpu_samples``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.sample import Sample
from finops.analysis.idle import IdlePolicy
from finops.db.models import DirtyHour, Gpu, GpuSample, LedgerEntry, Node
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.service.scheduler import run_rollup
from finops.timeutil import HOUR, floor_hour, to_epoch
from tests.ledger.test_tsdb_metering import DAY_GPUS, PRICING, day_readings, exposition
from tests.support import scenario
from tests.support.environment import debian_binary
from tests.support.prometheus_server import import_prometheus, victoria_metrics


@pytest.fixture
def vm_url(tmp_path: Path) -> Iterator[str]:
    with victoria_metrics(debian_binary("victoria-metrics"), tmp_path) as url:
        yield url


def late_gpu(readings: list[Sample]) -> list[Sample]:
    """GPU 2's readings as those of another node's GPU 5 that entered service 17 s after the second hour began (off
    the step of 60 s)."""
    moved = []
    for s in readings:
        if s.labels["gpu"] == "2" and s.timestamp >= readings[0].timestamp + timedelta(hours=1):
            labels = {**s.labels, "gpu": "5", "uuid": "GPU-eeeeeeee-0000-0000-0000-000000000005"}
            moved.append(Sample("gpu", labels, s.values, s.timestamp + timedelta(seconds=17)))
    return moved


def test_gpus_are_registered_from_the_tsdb_series(sessions: sessionmaker[Session], vm_url: str) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    readings = day_readings(t0)
    import_prometheus(vm_url, exposition(readings, "gpu-d-01") + exposition(late_gpu(readings), "gpu-e-01"))
    tsdb = TsdbTelemetry(PrometheusClient(vm_url))
    start, end = to_epoch(t0) - HOUR, to_epoch(t0) + 2 * HOUR
    with sessions.begin() as session:
        assert tsdb.register_gpus(session, start, end) == DAY_GPUS + 1
        assert tsdb.register_gpus(session, start, end) == 0
        found = {
            (node, gpu.gpu_index): (gpu.uuid, gpu.model, to_epoch(gpu.in_service_from))
            for gpu, node in session.execute(select(Gpu, Node.hostname).join(Node, Node.id == Gpu.node_id))
        }
        dirty = {to_epoch(hour) for hour in session.scalars(select(DirtyHour.hour))}
    first = to_epoch(t0)
    assert found == {
        **{
            ("gpu-d-01", index): (f"GPU-dddddddd-0000-0000-0000-00000000000{index}", scenario.MODEL, first)
            for index in range(DAY_GPUS)
        },
        ("gpu-e-01", 5): ("GPU-eeeeeeee-0000-0000-0000-000000000005", scenario.MODEL, first + HOUR + 17),
    }
    assert dirty == {floor_hour(first), floor_hour(first) + HOUR}


def test_scheduled_rollup_from_the_tsdb_registers_gpus_and_stores_no_readings(
    sessions: sessionmaker[Session], vm_url: str
) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    import_prometheus(vm_url, exposition(day_readings(t0), "gpu-d-01"))
    tsdb = TsdbTelemetry(PrometheusClient(vm_url), discovery_lookback_seconds=3 * 86400)
    built, _ = run_rollup(sessions, PRICING, IdlePolicy(), tsdb=tsdb)
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Gpu)) == DAY_GPUS
        assert session.scalar(select(func.count()).select_from(GpuSample)) == 0
        metered = session.scalar(select(func.sum(LedgerEntry.sample_count)))
    assert built.hours >= 48 and metered == len(day_readings(t0))
