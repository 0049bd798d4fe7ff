"""The TSDB mode's node fabric and storage rates: read from the collectors' byte counters in a real VictoriaMetrics
into ``node_io_hours``, and an idle episode judged on the TSDB's readings told waiting on storage by them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.idle import IdlePolicy, detect_idle
from finops.analysis.waste import WAITING_ON_STORAGE
from finops.db.models import IdleEpisode, Node, NodeIoHour
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.timeutil import HOUR, to_epoch
from tests.ledger.test_tsdb_metering import PRICING, day_readings, exposition, seed_day
from tests.support import scenario
from tests.support.environment import debian_binary
from tests.support.prometheus_server import import_prometheus, victoria_metrics

LUSTRE = 2.1e9
"""Bytes per second the node reads from Lustre in minutes [300, 400) of the day, while its GPUs idle."""


@pytest.fixture
def vm_url(tmp_path: Path) -> Iterator[str]:
    with victoria_metrics(debian_binary("victoria-metrics"), tmp_path) as url:
        yield url


def counters(t0: int, node: str) -> list[str]:
    """A day of the collector's byte counters on ``node``, scraped every minute (``instance`` host:port, no Hostname
    label): Lustre reads at :data:`LUSTRE` in minutes [300, 400), 1 MB/s of sda reads throughout and 1 GB/s through
    dm-0 (stacked on sda: left out), InfiniBand at 50 MB/s."""
    lines = []
    lustre = 0.0
    for minute in range(24 * 60):
        ms = (t0 + 60 * minute) * 1000
        base = f'instance="{node}:9835",job="gpu-finops-collector"'
        lines += [
            f'gpufinops_lustre_client_read_bytes_total{{{base},filesystem="lustrefs"}} {lustre!r} {ms}',
            f'gpufinops_disk_read_bytes_total{{{base},device="sda"}} {1e6 * 60 * minute!r} {ms}',
            f'gpufinops_disk_read_bytes_total{{{base},device="dm-0"}} {1e9 * 60 * minute!r} {ms}',
            f'gpufinops_infiniband_received_bytes_total{{{base},device="mlx5_0",port="1"}} {5e7 * 60 * minute!r} {ms}',
        ]
        lustre += LUSTRE * 60 if 300 <= minute < 400 else 0.0
    return lines


def test_node_rates_from_the_tsdb_and_the_waste_reason_they_give(sessions: sessionmaker[Session], vm_url: str) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    readings = day_readings(t0)
    import_prometheus(vm_url, exposition(readings, "gpu-d-01") + counters(to_epoch(t0), "gpu-d-01"))
    tsdb = TsdbTelemetry(PrometheusClient(vm_url))
    hours = [to_epoch(t0) + h * HOUR for h in range(24)]
    with sessions.begin() as session:
        seed_day(session, t0, readings, [(1, 320, None), (2, 0, 1000)])
        written = tsdb.store_node_rates(session, hours)
        rows = {
            (to_epoch(r.hour), r.kind): (r.readings, r.rate_sum / r.readings, r.rate_max)
            for r in session.scalars(select(NodeIoHour).join(Node).where(Node.hostname == "gpu-d-01"))
        }
    assert written == len(rows) == 24 * 3, "three kinds read: Lustre, disk, InfiniBand"
    readings_, mean, peak = rows[hours[5], "lustre_read"]  # minutes 300-359: reading all hour
    assert readings_ == 60
    assert LUSTRE * 0.9 < mean <= LUSTRE * 1.001 and peak == pytest.approx(LUSTRE, rel=1e-6)
    assert rows[hours[8], "lustre_read"][1] == 0.0, "no reads after minute 400"
    assert rows[hours[12], "disk_read"][1] == pytest.approx(1e6, rel=1e-6), "dm-0 is left out"
    assert rows[hours[12], "infiniband_received"][1] == pytest.approx(5e7, rel=1e-6)

    with sessions.begin() as session:
        assert tsdb.store_node_rates(session, hours[:1]) == 3, "an hour read again replaces its rows"
        policy = IdlePolicy(window_seconds=1200, grace_seconds=300)
        assert detect_idle(session, t0 + timedelta(hours=4), t0 + timedelta(hours=8), policy, PRICING, tsdb) > 0
        judged = session.execute(select(IdleEpisode.reason, IdleEpisode.evidence)).all()
    assert {reason for reason, _ in judged} == {WAITING_ON_STORAGE}
    assert all(" GB/s Lustre reads during the episode" in evidence for _, evidence in judged)
