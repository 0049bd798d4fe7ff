"""GPUs found in a real VictoriaMetrics or Prometheus (``FINOPS_TELEMETRY_SOURCE=tsdb``): registered with their node,
index, model and UUID from the series' labels and entering service at their first reading; the scheduler's rollup
then builds the ledger from the TSDB with no row in ``gpu_samples``; discovery over days stays within Prometheus'
limit of samples per query, and asks a few queries, not one per GPU."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from finops.analysis.idle import IdlePolicy
from finops.db.ledger_tables import DirtyHour, LedgerEntry
from finops.db.models import Gpu, GpuSample, Node
from finops.ingest.prometheus import PrometheusClient, PrometheusError
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.service.scheduler import run_rollup
from finops.timeutil import HOUR, floor_hour, to_epoch
from tests.ledger.test_tsdb_metering import DAY_GPUS, PRICING, day_readings, exposition
from tests.ledger.test_tsdb_queries import CountingClient
from tests.support import scenario
from tests.support.environment import debian_binary
from tests.support.prometheus_server import TsdbLoader, backfill_openmetrics, prometheus


def late_gpu(readings: list[Sample]) -> list[Sample]:
    """GPU 2's readings as those of another node's GPU 5 that entered service 17 s after the second hour began (off
    the step of 60 s)."""
    moved = []
    for s in readings:
        if s.labels["gpu"] == "2" and s.timestamp >= readings[0].timestamp + timedelta(hours=1):
            labels = {**s.labels, "gpu": "5", "uuid": "GPU-eeeeeeee-0000-0000-0000-000000000005"}
            moved.append(Sample("gpu", labels, s.values, s.timestamp + timedelta(seconds=17)))
    return moved


def test_gpus_are_registered_from_the_tsdb_series(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    readings = day_readings(t0)
    url = tsdb(exposition(readings, "gpu-d-01") + exposition(late_gpu(readings), "gpu-e-01"))
    telemetry = TsdbTelemetry(PrometheusClient(url))
    start, end = to_epoch(t0) - HOUR, to_epoch(t0) + 2 * HOUR
    with sessions.begin() as session:
        assert telemetry.register_gpus(session, start, end) == DAY_GPUS + 1
        assert telemetry.register_gpus(session, start, end) == 0
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
    sessions: sessionmaker[Session], tsdb: TsdbLoader
) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    url = tsdb(exposition(day_readings(t0), "gpu-d-01"))
    telemetry = TsdbTelemetry(PrometheusClient(url), discovery_lookback_seconds=3 * 86400)
    built, _ = run_rollup(sessions, PRICING, IdlePolicy(), tsdb=telemetry)
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Gpu)) == DAY_GPUS
        assert session.scalar(select(func.count()).select_from(GpuSample)) == 0
        metered = session.scalar(select(func.sum(LedgerEntry.sample_count)))
    assert built.hours >= 48 and metered == len(day_readings(t0))


def test_discovery_over_a_day_holds_few_samples_per_prometheus_query(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    backfill_openmetrics(debian_binary("promtool"), tmp_path, exposition(day_readings(t0), "gpu-d-01"))
    start, end = to_epoch(t0), to_epoch(t0) + 86400
    # A day of 3 GPUs at 60 s is some 5,700 samples held by one subquery, 6 hours some 1,400.
    flags = ["--query.max-samples=2000"]
    with prometheus(debian_binary("prometheus"), tmp_path, flags=flags) as url, sessions.begin() as session:
        client = PrometheusClient(url)
        with pytest.raises(PrometheusError, match="too many samples"):
            TsdbTelemetry(client, discovery_steps_per_query=86400 // 60).register_gpus(session, start, end)
        assert TsdbTelemetry(client, discovery_steps_per_query=360).register_gpus(session, start, end) == DAY_GPUS
        entered = set(session.scalars(select(Gpu.in_service_from)))
    assert {to_epoch(first) for first in entered} == {start}


def entering_fleet(gpus: int, t0: datetime) -> list[str]:
    """Two hours of 1-minute readings (dcgm-exporter's exposition) of ``gpus`` GPUs, 8 a node, from ``t0``: the even
    ones read from ``t0`` on, each odd one ``i`` from minute ``i`` mod 50, 17 s past it (off the step)."""
    lines = []
    for node in range(-(-gpus // 8)):
        readings = []
        for index in range(node * 8, min(gpus, node * 8 + 8)):
            first = t0 if index % 2 == 0 else t0 + timedelta(minutes=index % 50, seconds=17)
            labels = {"gpu": str(index % 8), "uuid": fleet_uuid(index), "model": scenario.MODEL}
            values = {m.GPU_UTILIZATION: 0.5, m.GPU_ENERGY: 1000.0, m.GPU_MEMORY_USED: 2.0**30}
            readings += [Sample("gpu", labels, values, first + timedelta(minutes=minute))
                         for minute in range(int((t0 + timedelta(hours=2) - first).total_seconds() // 60))]  # fmt: skip
        lines += exposition(readings, f"gpu-f-{node:02d}")
    return lines


def fleet_uuid(index: int) -> str:
    return f"GPU-ffffffff-0000-0000-0000-{index:012d}"


@pytest.mark.parametrize("gpus", [16, 120])
def test_discovery_asks_few_queries_whatever_the_fleet(
    sessions: sessionmaker[Session], tsdb: TsdbLoader, gpus: int
) -> None:
    """The GPUs found are registered at their first readings with a few queries, not one per GPU: the subquery of
    each utilisation series (dcgm-exporter's, AMD's exporter's), then the raw readings around the first ones: of the
    GPUs entering together, in one query of every series when they are too many to name in one; of the others,
    named some 50 a query."""
    t0 = scenario.start_hour() - timedelta(days=1)
    client = CountingClient(tsdb(entering_fleet(gpus, t0)))
    start = to_epoch(t0)
    with sessions.begin() as session:
        assert TsdbTelemetry(client).register_gpus(session, start, start + 2 * HOUR) == gpus
        entered = {gpu.uuid: to_epoch(gpu.in_service_from) for gpu in session.scalars(select(Gpu))}
    assert entered == {
        fleet_uuid(index): start if index % 2 == 0 else start + index % 50 * 60 + 17 for index in range(gpus)
    }
    subqueries = sum("timestamp(" in query for query, _ in client.asked)
    assert subqueries == 2
    # 16 GPUs: all named in one query. 120: the 60 entering together in one query of every series, the other 60
    # named in two.
    assert len(client.asked) - subqueries == (1 if gpus == 16 else 3)
