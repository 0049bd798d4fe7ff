"""AMD Device Metrics Exporter series (tests/fixtures/amd/device-metrics-exporter.prom: an MI300X in CPX mode and an
MI250X, values written by hand, see the file's header) in a real VictoriaMetrics and a real Prometheus, read by the
Prometheus pull and by the TSDB metering: readings per partition and GCD, jobs from ``job_id`` and ``namespace``/
``pod``, each package's energy counted once and split over its devices, and the ledger's
utilisation, energy and prices equal to values computed by hand."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Allocation, Gpu, GpuSample, Job, Node, Team
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions, import_range
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import from_epoch, to_epoch
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

FIXTURE = Path(__file__).parents[1] / "fixtures" / "amd" / "device-metrics-exporter.prom"
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)
MINUTES = 60
PACKAGE_WATTS = {"mi300x-01": 640.0, "mi250x-01": 480.0}
"""The fixture's socket power per node's package (W); the energy counter grows by it every second."""
MI300X_PARTITION = "AMD Instinct MI300X OAM (CPX partition 1/8)"


def readings(t0: int) -> list[str]:
    """The fixture's scrape repeated once a minute for an hour from ``t0`` (epoch seconds), as exposition lines with
    millisecond timestamps: every value as in the fixture, the energy counters growing by their package's socket
    power × 60 s each minute (µJ)."""
    lines = []
    for family in text_string_to_metric_families(FIXTURE.read_text()):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            for minute in range(MINUTES):
                value = sample.value
                if sample.name == "gpu_energy_consumed":
                    value += minute * 60 * PACKAGE_WATTS[sample.labels["hostname"]] * 1e6
                lines.append(f"{sample.name}{{{labels}}} {value!r} {(t0 + 60 * minute) * 1000}")
    return lines


def by_device(session: Session) -> dict[tuple[str, int], Gpu]:
    """The GPUs by (node, index)."""
    return {
        (node, gpu.gpu_index): gpu for gpu, node in session.execute(select(Gpu, Node.hostname).join(Node))
    }  # fmt: skip


def readings_at(session: Session, at: datetime) -> dict[tuple[str, int], GpuSample | None]:
    """Each GPU's reading stored at instant ``at``, by (node, index); None where it has none."""
    return {
        key: session.scalars(select(GpuSample).where(GpuSample.gpu_id == gpu.id, GpuSample.ts == at)).one_or_none()
        for key, gpu in by_device(session).items()
    }


def seed_jobs(session: Session, t0: int) -> None:
    """The fixture's jobs holding their devices the whole hour: Slurm job 7001 on MI300X partitions 0-3, the pod
    ml-team/trainer-0 on partitions 4-7, Slurm job 7002 on MI250X GCD 0 (GCD 1 held by nobody)."""
    team = Team(name="amd")
    session.add(team)
    session.flush()
    gpus = by_device(session)
    holdings = {
        ("slurm", "7001"): [gpus["mi300x-01", i] for i in range(4)],
        ("kubernetes", "ml-team/trainer-0"): [gpus["mi300x-01", i] for i in range(4, 8)],
        ("slurm", "7002"): [gpus["mi250x-01", 0]],
    }
    for (scheduler, job_id), held in holdings.items():
        job = Job(
            scheduler=scheduler, cluster="c", job_id=job_id, job_id_raw=job_id, user="u", account="a", partition="p",
            name="j", state="RUNNING", start=from_epoch(t0), end=None, gpus=len(held), node_list="n", team_id=team.id,
        )  # fmt: skip
        session.add(job)
        session.flush()
        session.add_all(Allocation(job_pk=job.id, gpu_id=gpu.id, start=from_epoch(t0), end=None) for gpu in held)
    session.flush()


def check_ledger(session: Session, t0: int) -> None:
    """The hour's ledger against hand-computed values: per package, energy = 59 counter increments of its power ×
    60 s (the hour's first reading has none before it), counted once, an equal share on each of its devices (the
    pull and the TSDB metering alike). Per device, used GPU-seconds = its
    gfx activity × 3,600 s; cost = the catalogue's rate (MI300X $6.00, a CPX partition 1/8 of it; MI250X $1.35 a
    GCD)."""
    gpus = by_device(session)
    rows = {row.gpu_id: row for row in session.scalars(select(LedgerEntry).where(LedgerEntry.hour == from_epoch(t0)))}
    assert len(rows) == 10
    for node, devices in (("mi300x-01", range(8)), ("mi250x-01", range(2))):
        energy = [rows[gpus[node, i].id].energy_joules for i in devices]
        package = 59 * 60 * PACKAGE_WATTS[node]
        assert energy == pytest.approx([package / len(devices)] * len(devices), rel=1e-9)
    for index, percent in enumerate([100, 100, 95, 90, 0, 0, 12, 12]):
        row = rows[gpus["mi300x-01", index].id]
        assert row.used_gpu_seconds == pytest.approx(percent / 100 * 3600, abs=1e-6)
        assert row.allocated_cost == Decimal("0.75")
    for index, percent in enumerate([87, 0]):
        row = rows[gpus["mi250x-01", index].id]
        assert row.used_gpu_seconds == pytest.approx(percent / 100 * 3600, abs=1e-6)
        assert row.allocated_cost == Decimal("1.35")
    partition0 = rows[gpus["mi300x-01", 0].id]
    assert partition0.sm_occupancy_ratio == pytest.approx(0.45)
    assert partition0.tensor_active_ratio == pytest.approx(0.30)
    assert partition0.sm_active_ratio == pytest.approx(0.60)
    assert partition0.graphics_engine_active_ratio == pytest.approx(0.98)
    assert partition0.dram_active_ratio is None and partition0.fp64_active_ratio is None
    assert rows[gpus["mi300x-01", 5].id].sm_occupancy_ratio is None  # profiler off there: null, not 0


def test_amd_series_pulled_into_the_ledger(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    client = PrometheusClient(tsdb(readings(t0)))
    result = import_range(sessions, client, from_epoch(t0), from_epoch(t0 + 3600), PullOptions())
    assert result.nodes == {"mi300x-01", "mi250x-01"} and len(result.gpus) == 10
    with sessions.begin() as session:
        gpus = by_device(session)
        assert {gpu.model for gpu in gpus.values()} == {MI300X_PARTITION, "AMD Instinct MI250X"}
        assert gpus["mi300x-01", 0].uuid == "5cff74b5-0000-1000-8000-7e3e3a6ed2a1"
        assert gpus["mi250x-01", 1].memory_total_bytes == 65520 * 2**20
        samples = {
            (gpu_id, to_epoch(ts)): sample
            for gpu_id, ts, sample in session.execute(select(GpuSample.gpu_id, GpuSample.ts, GpuSample))
        }
        assert len(samples) == 10 * MINUTES
        first = {index: samples[gpus["mi300x-01", index].id, t0 + 600] for index in range(8)}
        # partition 0 reports the package's counter and power; each partition stores 1/8 of them
        assert [first[i].energy_joules for i in range(8)] == pytest.approx([(1.2e7 + 10 * 60 * 640.0) / 8] * 8)
        assert [first[i].power_watts for i in range(8)] == [80.0] * 8
        assert [first[i].job_id for i in range(8)] == ["7001"] * 4 + ["ml-team/trainer-0"] * 4
        assert first[2].utilization_ratio == pytest.approx(0.95)
        assert first[2].memory_utilization_ratio == pytest.approx(0.35)
        assert first[2].memory_used_bytes == 20480 * 2**20
        assert first[7].temperature_celsius == 65.0
        gcd = [samples[gpus["mi250x-01", index].id, t0 + 600] for index in range(2)]
        assert (gcd[0].job_id, gcd[1].job_id) == ("7002", None)
        assert [g.energy_joules for g in gcd] == pytest.approx([(3.4e6 + 10 * 60 * 480.0) / 2] * 2)
        assert [g.power_watts for g in gcd] == [240.0, 240.0]
        assert (gcd[0].temperature_celsius, gcd[1].temperature_celsius) == (44.0, 41.0)
        seed_jobs(session, t0)
        rollup(session, PRICING, t0 + 3600)
        check_ledger(session, t0)


def test_amd_series_metered_from_the_tsdb(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    telemetry = TsdbTelemetry(PrometheusClient(tsdb(readings(t0))))
    with sessions.begin() as session:
        assert telemetry.register_gpus(session, t0, t0 + 3600) == 10
        assert session.scalar(select(func.min(Gpu.in_service_from))) == from_epoch(t0)
        seed_jobs(session, t0)
        rollup(session, PRICING, t0 + 3600, meter=telemetry.meter)
        assert session.scalar(select(func.count()).select_from(GpuSample)) == 0
        check_ledger(session, t0)
