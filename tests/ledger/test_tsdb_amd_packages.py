"""What an AMD package reports once, split over its devices by the TSDB metering and by the Prometheus pull alike
(:mod:`finops.ingest.tsdb_packages`, :mod:`finops.ingest.package_split`), through a real VictoriaMetrics and a real
Prometheus: the MI300X in CPX mode (8 partitions, the energy counter on partition 0 only) and the MI250X (power and
energy on die 0, die 1 reading 0; its counter reset at minute 30) of tests/ledger/test_pull_amd_packages.py, values
written by hand there. Jobs cut each device's hour at minutes of its own, and partition 5's and die 1's series are
missing from minute 31 to minute 47, so from the whole of the pull's query window of minutes 36-47 (the TSDBs fill a
few minutes after a device's last reading from it, by their lookback: Prometheus five).

Per package, the ledger's energy of the hour equals its counter's increase, each device holding ``1 / n`` of it
(``n`` = 8 and 2, the packages' make, not the devices seen); per segment of the TSDB metering, each device's energy is
``1 / n`` of the counter's increase over that segment. A device with no series in the whole hour holds none of it,
and the others still ``1 / n`` each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Set
from datetime import timedelta
from itertools import pairwise

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour, TsdbGpuMetering
from finops.db.models import Allocation, GpuSample, Job, Team
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions, import_range
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.ledger.rollup import rollup
from finops.timeutil import from_epoch, to_epoch
from tests.ledger.test_pull_amd_packages import counter, increase, readings
from tests.ledger.test_tsdb_amd import PRICING, by_device, readings_at
from tests.ledger.test_tsdb_queries import CountingClient
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

DEVICES = {"mi300x-01": 8, "mi250x-01": 2}
MISSING = {"5cff74b5-0000-1000-8050-7e3e3a6ed2a1", "a1ff740f-0000-1000-8042-6d7f0c1b2e30"}
"""MI300X partition 5 and MI250X die 1: no series from minute 31 to minute 47."""
GAP = range(31, 48)
ABSENT = "5cff74b5-0000-1000-8030-7e3e3a6ed2a1"
"""MI300X partition 3: in :func:`test_tsdb_stores_no_share_for_a_device_without_series`, no series in the hour."""


def holdings(t0: int) -> dict[tuple[str, int], tuple[int, int | None]]:
    """Per device (node, index), one job's holding (epoch start, end or None): partition i of the MI300X from
    minute 3 + 5 i (and 17 s) to minute 40 + 2 i (and 29 s), die 0 of the MI250X from minute 12 (and 5 s) to 47,
    die 1 from minute 20 (and 30 s) on: no two devices of a package cut alike."""
    found: dict[tuple[str, int], tuple[int, int | None]] = {
        ("mi300x-01", i): (t0 + 60 * (3 + 5 * i) + 17, t0 + 60 * (40 + 2 * i) + 29) for i in range(8)
    }
    found["mi250x-01", 0] = (t0 + 12 * 60 + 5, t0 + 47 * 60)
    found["mi250x-01", 1] = (t0 + 20 * 60 + 30, None)
    return found


def lines(t0: int) -> list[str]:
    """The readings of test_pull_amd_packages (each partition's activity its own, so the TSDB mode finds every
    partition by its ``gpu_gfx_activity``) without :data:`MISSING`'s in :data:`GAP`."""
    gap = range((t0 + 60 * GAP.start) * 1000, (t0 + 60 * GAP.stop) * 1000)
    return [
        line
        for line in readings(t0, partition_activity=True)
        if not (int(line.rsplit(" ", 1)[1]) in gap and _of_missing(line))
    ]


def _of_missing(line: str) -> bool:
    return any(f'gpu_uuid="{uuid}"' in line for uuid in MISSING)


def segment_increase(node: str, t0: int, a: int, b: int) -> float:
    """The package's counter increase over [a, b) (J): its increments between consecutive minute readings that end
    in [a, b), a value below the previous one counting itself."""
    total = 0.0
    for minute, (before, after) in enumerate(pairwise(counter(node, m) for m in range(60)), start=1):
        if a <= t0 + 60 * minute < b:
            total += after - before if after >= before else after
    return total


def seed(session: Session, t0: int) -> None:
    """One job per device holding it as :func:`holdings` says."""
    team = Team(name="amd")
    session.add(team)
    session.flush()
    gpus = by_device(session)
    for number, ((node, index), (start, end)) in enumerate(sorted(holdings(t0).items())):
        job = Job(
            scheduler="slurm", cluster="c", job_id=str(9000 + number), job_id_raw=str(9000 + number), user="u",
            account="a", partition="p", name="j", state="RUNNING", start=from_epoch(start), end=None, gpus=1,
            node_list=node, team_id=team.id,
        )  # fmt: skip
        session.add(job)
        session.flush()
        session.add(
            Allocation(
                job_pk=job.id, gpu_id=gpus[node, index].id, start=from_epoch(start),
                end=from_epoch(end) if end is not None else None,
            )
        )  # fmt: skip
    session.flush()


def check_hour(session: Session, t0: int, absent: Set[tuple[str, int]] = frozenset()) -> None:
    """Per package: in the ledger's energy of the hour each device holds ``1 / n`` of the counter's increase, a
    device of ``absent`` (node, index: no series in the hour) none; the package's energy is the increase, counted
    once, less the absent devices' shares."""
    gpus = by_device(session)
    energy: dict[int, float] = defaultdict(float)
    for row in session.scalars(select(LedgerEntry).where(LedgerEntry.hour == from_epoch(t0))):
        energy[row.gpu_id] += row.energy_joules or 0.0
    for node, n in DEVICES.items():
        shares = [energy[gpus[node, i].id] for i in range(n)]
        expected = [0.0 if (node, i) in absent else increase(node) / n for i in range(n)]
        assert sum(shares) == pytest.approx(sum(expected), rel=1e-9)  # counted once
        assert shares == pytest.approx(expected, rel=1e-9)


def test_tsdb_splits_package_energy_per_segment(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    telemetry = TsdbTelemetry(PrometheusClient(tsdb(lines(t0))))
    with sessions.begin() as session:
        assert telemetry.register_gpus(session, t0, t0 + 3600) == 10
        seed(session, t0)
        rollup(session, PRICING, t0 + 3600, meter=telemetry.meter)
        gpus = by_device(session)
        node_of = {gpu.id: (node, index) for (node, index), gpu in gpus.items()}
        segments = session.scalars(select(TsdbGpuMetering)).all()
        cuts: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        for row in segments:
            node, index = node_of[row.gpu_id]
            a, b = to_epoch(row.start), to_epoch(row.stop)
            cuts[node, index].append((a, b))
            share = segment_increase(node, t0, a, b) / DEVICES[node]
            assert row.energy_joules == pytest.approx(share, rel=1e-9, abs=1e-6), (node, index, a - t0, b - t0)
        start, end = holdings(t0)["mi300x-01", 3]
        assert sorted(cuts["mi300x-01", 3]) == [(t0, start), (start, end), (end, t0 + 3600)]
        start, _ = holdings(t0)["mi250x-01", 1]
        assert sorted(cuts["mi250x-01", 1]) == [(t0, start), (start, t0 + 3600)]  # its own cuts, not die 0's
        check_hour(session, t0)


def test_tsdb_stores_no_share_for_a_device_without_series(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    """Partition 3 of the MI300X has no series in the hour (seen, and registered, the hour before) while a job holds
    it from minute 18:17 to 46:29. Its GPU-hour is costed but not measured: no segment metered, its rows without
    readings, energy or used time. The package's counter is still shared in eighths: each other partition holds 1/8
    of its increase, not 1/7, so the package's energy of the hour is 7/8 of it; the MI250X is unaffected."""
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    tag = f'gpu_uuid="{ABSENT}"'
    found = [line for line in lines(t0) if tag not in line] + [line for line in lines(t0 - 3600) if tag in line]
    telemetry = TsdbTelemetry(PrometheusClient(tsdb(found)))
    with sessions.begin() as session:
        assert telemetry.register_gpus(session, t0 - 3600, t0 + 3600) == 10
        seed(session, t0)
        rollup(session, PRICING, t0 + 3600, meter=telemetry.meter)
        gpus = by_device(session)
        absent = gpus["mi300x-01", 3]
        assert to_epoch(absent.in_service_from) == t0 - 3600
        hour = from_epoch(t0)
        metered = set(session.scalars(select(TsdbGpuMetering.gpu_id).where(TsdbGpuMetering.start >= hour)))
        assert metered == {gpu.id for gpu in gpus.values()} - {absent.id}
        rows = session.scalars(
            select(LedgerEntry).where(LedgerEntry.hour == hour, LedgerEntry.gpu_id == absent.id)
        ).all()
        start, end = holdings(t0)["mi300x-01", 3]
        (held,) = [row for row in rows if row.job_pk is not None]
        assert (sum(row.seconds for row in rows), held.seconds) == (3600, end - start)
        measured = {(row.sample_count, row.energy_joules, row.used_gpu_seconds, row.energy_cost) for row in rows}
        assert measured == {(0, 0.0, 0.0, 0)}  # no readings: not measured, no share given it
        assert held.allocated_cost is not None and held.allocated_cost > 0
        assert (held.used_cost, held.idle_cost, held.profiled_seconds, held.sm_active_ratio) == (0, 0, 0, None)
        team = session.scalars(
            select(LedgerTeamHour).where(LedgerTeamHour.hour == hour, LedgerTeamHour.team_id == held.team_id)
        ).one()
        assert team.unmetered_gpu_seconds == end - start  # the team's only holding without readings
        check_hour(session, t0, absent={("mi300x-01", 3)})


def test_pull_shares_hold_when_a_device_is_missing(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    client = PrometheusClient(tsdb(lines(t0)))
    options = PullOptions(max_points_per_query=12)  # windows of 12 minutes: 0-11, 12-23, 24-35, 36-47, 48-59
    import_range(sessions, client, from_epoch(t0), from_epoch(t0 + 3600), options)
    with sessions.begin() as session:
        gpus = by_device(session)
        stored = readings_at(session, from_epoch(t0 + 40 * 60))
        assert stored["mi300x-01", 5] is None and stored["mi250x-01", 1] is None
        partitions = [stored["mi300x-01", i] for i in range(8) if i != 5]
        # 1/8 of the package, not 1/7 of it: the missing partition's share is not given to the others
        assert [p.energy_joules for p in partitions if p] == pytest.approx([counter("mi300x-01", 40) / 8] * 7)
        assert [p.power_watts for p in partitions if p] == [80.0] * 7
        die = stored["mi250x-01", 0]
        assert die is not None and die.power_watts == 240.0  # 1/2 of the package, not all of it
        assert die.energy_joules == pytest.approx(counter("mi250x-01", 40) / 2)
        after = session.scalars(
            select(GpuSample).where(
                GpuSample.gpu_id == gpus["mi300x-01", 5].id, GpuSample.ts == from_epoch(t0 + 48 * 60)
            )
        ).one()
        assert after.energy_joules == pytest.approx(counter("mi300x-01", 48) / 8)  # carries the gap's increase

        seed(session, t0)
        rollup(session, PRICING, t0 + 3600)
        check_hour(session, t0)


def test_tsdb_finds_partitions_without_activity(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    """Exporters before 1.3.1: partitions 1-7 of the MI300X export no ``gpu_gfx_activity``; each is found by its
    VRAM series, metered, and holds 1/8 of the package's energy. Discovery asks as many queries as before: a
    subquery per exporter and one of the raw first readings of the devices found together."""
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    client = CountingClient(tsdb(readings(t0)))
    telemetry = TsdbTelemetry(client)
    with sessions.begin() as session:
        assert telemetry.register_gpus(session, t0, t0 + 3600) == 10
        assert [("timestamp(" in query, found) for query, found in client.asked] == [(True, 0), (True, 10), (False, 10)]
        gpus = by_device(session)
        assert {gpu.in_service_from for gpu in gpus.values()} == {from_epoch(t0)}
        seed(session, t0)
        rollup(session, PRICING, t0 + 3600, meter=telemetry.meter)
        metered = set(session.scalars(select(TsdbGpuMetering.gpu_id)))
        assert metered == {gpu.id for gpu in gpus.values()}
        check_hour(session, t0)


def test_tsdb_shares_partition_zero_activity(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    """Exporters before 1.3.1: only partition 0 of the MI300X has ``gpu_gfx_activity`` (100 %). As the pull gives it
    to every partition at each of its instants, the TSDB metering gives each partition, per segment of its own,
    partition 0's readings of that segment; the MI250X's dies keep their own activity."""
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    telemetry = TsdbTelemetry(PrometheusClient(tsdb(readings(t0))))
    with sessions.begin() as session:
        telemetry.register_gpus(session, t0, t0 + 3600)
        seed(session, t0)
        rollup(session, PRICING, t0 + 3600, meter=telemetry.meter)
        gpus = by_device(session)
        partitions = {gpus["mi300x-01", i].id for i in range(8)}
        for row in session.scalars(select(TsdbGpuMetering).where(TsdbGpuMetering.gpu_id.in_(partitions))):
            a, b = to_epoch(row.start), to_epoch(row.stop)
            minutes = sum(1 for minute in range(60) if a <= t0 + 60 * minute < b)  # partition 0's readings
            assert (row.samples, row.utilization_sum) == (minutes, pytest.approx(minutes * 1.0)), (a - t0, b - t0)
        used: dict[int, float] = defaultdict(float)
        for row in session.scalars(select(LedgerEntry).where(LedgerEntry.hour == from_epoch(t0))):
            used[row.gpu_id] += row.used_gpu_seconds or 0.0
        held = {device: min(end or t0 + 3600, t0 + 3600) - start for device, (start, end) in holdings(t0).items()}
        # partition 0's 100 % over each partition's holding, as the pull gives it; not measured would be 0 used
        assert [used[gpus["mi300x-01", i].id] for i in range(8)] == pytest.approx(
            [held["mi300x-01", i] for i in range(8)]
        )
        assert used[gpus["mi300x-01", 7].id] == pytest.approx(16 * 60 + 12)  # minute 38:17 to 54:29
        assert [used[gpus["mi250x-01", i].id] for i in range(2)] == pytest.approx([0.87 * held["mi250x-01", 0], 0.0])
