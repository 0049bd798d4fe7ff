"""What an AMD package reports once, pulled from a real VictoriaMetrics and a real Prometheus, split over its devices
by ingest's rule (:mod:`finops.ingest.package_split`): the ledger's energy of each package equals its counter's
increase, each device holding an equal share, nothing counted twice.

The readings are the exporter fixture's (tests/fixtures/amd/device-metrics-exporter.prom, values written by hand)
changed by hand to what the exporter gives in the other documented cases: the MI300X's activity (``gpu_gfx_activity``,
``gpu_umc_activity``) on partition 0 only, as amd-smi reports it per GPU (exporters before 1.3.1 took it from there,
ROCm/device-metrics-exporter issue 139); the MI250X's second die exporting 0 W and a 0 µJ counter (Linux amdgpu,
aldebaran_ppt.c: only the primary die has valid power data), and the MI250X's counter reset at minute 30 (a driver
reload). The pull is cut into query windows of 25 instants, so a package's counter is split in each window alike.
"""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker
from sqlalchemy.orm.session import Session

from finops.db.ledger_tables import LedgerEntry
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions, import_range
from finops.ledger.rollup import rollup
from finops.timeutil import from_epoch, to_epoch
from tests.ledger.test_tsdb_amd import FIXTURE, PACKAGE_WATTS, PRICING, by_device, readings_at, seed_jobs
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

MINUTES = 60
RESET_MINUTE = 30
"""The MI250X's energy counter restarts here: its value is then one minute's energy (the minute since the reset)."""
ACTIVITY = ("gpu_gfx_activity", "gpu_umc_activity")


def counter(node: str, minute: int) -> float:
    """The package's energy counter (J) at ``minute``: the MI300X's from the fixture's 1.2e7 J, the MI250X's from
    3.4e6 J until its reset, then from one minute's energy."""
    watts = PACKAGE_WATTS[node]
    if node == "mi250x-01" and minute >= RESET_MINUTE:
        return (minute - RESET_MINUTE + 1) * 60 * watts
    base = 1.2e7 if node == "mi300x-01" else 3.4e6
    return base + minute * 60 * watts


def increase(node: str) -> float:
    """The counter's increase over the hour (J), as Prometheus' ``resets`` and the ledger read it: the increments
    between consecutive readings, a value below the previous one counting itself."""
    values = [counter(node, minute) for minute in range(MINUTES)]
    return sum(b - a if b >= a else b for a, b in pairwise(values))


def readings(t0: int, partition_activity: bool = False) -> list[str]:
    """The changed scrape (see the module documentation) once a minute for an hour from ``t0``, as exposition lines
    with millisecond timestamps; ``partition_activity``: the MI300X's activity on each partition, as the fixture
    has it (exporters from 1.3.1)."""
    lines = []
    for family in text_string_to_metric_families(FIXTURE.read_text()):
        for sample in family.samples:
            labels = dict(sample.labels)
            partition = labels["hostname"] == "mi300x-01" and labels["gpu_partition_id"] != "0"
            if sample.name in ACTIVITY and partition and not partition_activity:
                continue
            series = [(sample.name, labels, sample.value)]
            if (
                sample.name in ("gpu_average_package_power", "gpu_energy_consumed")
                and labels["hostname"] == "mi250x-01"
            ):
                second_die = {**labels, "gpu_id": "1", "gpu_uuid": "a1ff740f-0000-1000-8042-6d7f0c1b2e30", "job_id": ""}
                series.append((sample.name, second_die, 0.0))
            for name, tags, value in series:
                text = ",".join(f'{key}="{tag}"' for key, tag in sorted(tags.items()))
                for minute in range(MINUTES):
                    if name == "gpu_energy_consumed" and value:
                        value = counter(tags["hostname"], minute) * 1e6
                    lines.append(f"{name}{{{text}}} {value!r} {(t0 + 60 * minute) * 1000}")
    return lines


def test_package_values_split_over_devices(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    client = PrometheusClient(tsdb(readings(t0)))
    result = import_range(sessions, client, from_epoch(t0), from_epoch(t0 + 3600), PullOptions(max_points_per_query=25))
    assert result.chunks == 3 and len(result.gpus) == 10
    with sessions.begin() as session:
        gpus = by_device(session)
        found = readings_at(session, from_epoch(t0 + 40 * 60))
        stored = {key: reading for key, reading in found.items() if reading is not None}
        assert stored.keys() == found.keys()
        partitions = [stored["mi300x-01", i] for i in range(8)]
        assert [p.utilization_ratio for p in partitions] == [1.0] * 8  # partition 0's 100 %, the GPU's mean
        assert [p.memory_utilization_ratio for p in partitions] == pytest.approx([0.4] * 8)
        assert [p.power_watts for p in partitions] == [80.0] * 8
        assert [p.energy_joules for p in partitions] == pytest.approx([counter("mi300x-01", 40) / 8] * 8)
        dies = [stored["mi250x-01", i] for i in range(2)]
        assert [d.power_watts for d in dies] == [240.0, 240.0]  # not the second die's 0
        assert [d.energy_joules for d in dies] == pytest.approx([counter("mi250x-01", 40) / 2] * 2)
        assert [d.utilization_ratio for d in dies] == pytest.approx([0.87, 0.0])  # each die's own activity

        seed_jobs(session, t0)  # every partition held: its used time is the GPU's activity
        rollup(session, PRICING, t0 + 3600)
        rows = {
            row.gpu_id: row for row in session.scalars(select(LedgerEntry).where(LedgerEntry.hour == from_epoch(t0)))
        }
        for node, devices in (("mi300x-01", 8), ("mi250x-01", 2)):
            energy = [rows[gpus[node, i].id].energy_joules for i in range(devices)]
            assert sum(energy) == pytest.approx(increase(node), rel=1e-9)  # once: the counter's increase
            assert energy == pytest.approx([increase(node) / devices] * devices, rel=1e-9)
        assert increase("mi250x-01") == pytest.approx(59 * 60 * 480.0)  # the reset loses nothing
        assert [rows[gpus["mi300x-01", i].id].used_gpu_seconds for i in range(8)] == pytest.approx([3600.0] * 8)
