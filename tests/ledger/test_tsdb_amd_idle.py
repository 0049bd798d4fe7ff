"""Idle episodes of an MI300X's partitions judged from a real VictoriaMetrics or Prometheus equal those judged on the
readings the Prometheus pull stores, field for field, where only partition 0 exports ``gpu_gfx_activity`` (exporters
before 1.3.1; :mod:`finops.ingest.tsdb_idle_partitions`): the pull gives every partition partition 0's activity at
each of its own readings, and so must the TSDB path. Readings: tests/ledger/test_pull_amd_packages.py's scrape, once a
minute, with partition 0's activity set to 0 % where a case says; without the sharing only partition 0 (and the
MI250X's die 1, which reads 0 % of its own) would have episodes. The pull reads the hours in one query window and
decides the sharing per hour of it, as the TSDB path does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from finops.analysis.idle import IdlePolicy, detect_idle
from finops.db.models import Allocation, GpuSample, IdleEpisode, Job, Team
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions, import_range
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.timeutil import from_epoch, to_epoch
from tests.ledger.test_pull_amd_packages import readings
from tests.ledger.test_tsdb_amd import PRICING, by_device
from tests.ledger.test_tsdb_amd_packages import seed
from tests.ledger.test_tsdb_idle import episodes
from tests.ledger.test_tsdb_queries import CountingClient
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

PARTITION_0 = 'gpu_uuid="5cff74b5-0000-1000-8000-7e3e3a6ed2a1"'
PARTITION_5 = 'gpu_uuid="5cff74b5-0000-1000-8050-7e3e3a6ed2a1"'
POLICY = IdlePolicy(window_seconds=300, grace_seconds=60)

Episode = tuple[str, int, int, int, bool, object]


def _at(line: str) -> int:
    """The epoch second of an exposition line's millisecond timestamp."""
    return int(line.rsplit(" ", 1)[1]) // 1000


def _idle_partition_0(lines: list[str], idle: Callable[[int], bool]) -> list[str]:
    """``lines`` with partition 0's ``gpu_gfx_activity`` 0 % at the seconds ``idle`` says."""
    return [
        f"{line.rsplit(' ', 2)[0]} 0.0 {line.rsplit(' ', 1)[1]}"
        if line.startswith("gpu_gfx_activity{") and PARTITION_0 in line and idle(_at(line))
        else line
        for line in lines
    ]


def _seed_whole(session: Session, t0: int, hours: int) -> None:
    """One job per device holding it over [t0, t0 + hours)."""
    team = Team(name="amd")
    session.add(team)
    session.flush()
    for number, gpu in enumerate(gpu for _, gpu in sorted(by_device(session).items())):
        job = Job(
            scheduler="slurm", cluster="c", job_id=str(9000 + number), job_id_raw=str(9000 + number), user="u",
            account="a", partition="p", name="j", state="RUNNING", start=from_epoch(t0), end=None, gpus=1,
            node_list="n", team_id=team.id,
        )  # fmt: skip
        session.add(job)
        session.flush()
        session.add(Allocation(job_pk=job.id, gpu_id=gpu.id, start=from_epoch(t0), end=from_epoch(t0 + hours * 3600)))
    session.flush()


def _pulled_and_judged(
    sessions: sessionmaker[Session], client: PrometheusClient, t0: int, hours: int, jobs: Callable[[Session], None]
) -> tuple[list[Episode], list[Episode]]:
    """The episodes of [t0, t0 + hours) judged on the pull's stored readings and judged from the TSDB, each
    (device, job, start − t0, end − t0, memory held, cost)."""
    start, end = from_epoch(t0), from_epoch(t0 + hours * 3600)
    import_range(sessions, client, start, end, PullOptions())
    with sessions.begin() as session:
        jobs(session)
        detect_idle(session, start, end, POLICY, PRICING)
        pulled = episodes(session)
        session.execute(delete(IdleEpisode))
        session.execute(delete(GpuSample))
        detect_idle(session, start, end, POLICY, PRICING, TsdbTelemetry(client))
        judged = episodes(session)
        names = {gpu.id: f"{node}/{index}" for (node, index), gpu in by_device(session).items()}

    def named(found: list[tuple[int, int, int, int, bool, object]]) -> list[Episode]:
        return [(names[gpu], job, a - t0, b - t0, memory, cost) for gpu, job, a, b, memory, cost in found]

    return named(pulled), named(judged)


def test_partitions_judged_on_partition_zero_readings(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    """Partition 0 idle from minute 5, jobs cut each partition's hour at minutes of its own (test_tsdb_amd_packages'
    holdings): an episode on every partition, as the pull's, each with its own memory. The partitions' memory is
    read in one query for the hour, and not that of a second MI300X (another serial number) whose partition 0 is
    busy."""
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    lines = readings(t0)
    busy = [
        line.replace('hostname="mi300x-01"', 'hostname="mi300x-02"')
        .replace('serial_number="692312000147"', 'serial_number="692312000999"')
        .replace('gpu_uuid="5cff74b5-', 'gpu_uuid="6cff74b5-')
        for line in lines
        if 'hostname="mi300x-01"' in line
    ]
    client = CountingClient(tsdb(_idle_partition_0(lines, lambda at: at >= t0 + 300) + busy))
    pulled, judged = _pulled_and_judged(sessions, client, t0, 1, lambda session: seed(session, t0))
    assert {episode[0] for episode in pulled} == {f"mi300x-01/{i}" for i in range(8)} | {"mi250x-01/1"}
    assert judged == pulled
    memory_reads = [query for query, _ in client.asked if query.startswith("gpu_used_vram{")]
    assert len(memory_reads) == 1 and "6cff74b5" not in memory_reads[0]


def test_partition_without_series_for_part_of_the_hour(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    """Partition 5 has no series at all from minute 31 to 47: from the TSDB it is given partition 0's readings only
    where it has a reading of its own, so its idle run breaks at the gap, its first episode ending the max gap after
    its last reading (minute 30), as its raw readings say. The pull's stored readings run on into the gap by the
    TSDB's lookback (one step on VictoriaMetrics, five minutes on Prometheus), so there its first episode ends
    later; every other episode is the pull's."""
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    gap = range(t0 + 31 * 60, t0 + 48 * 60)
    lines = [line for line in readings(t0) if not (PARTITION_5 in line and _at(line) in gap)]
    client = PrometheusClient(tsdb(_idle_partition_0(lines, lambda at: at >= t0 + 300)))
    pulled, judged = _pulled_and_judged(sessions, client, t0, 1, lambda session: _seed_whole(session, t0, 1))
    first, second = [episode for episode in judged if episode[0] == "mi300x-01/5"]
    assert (first[2], first[3]) == (300, 30 * 60 + POLICY.max_gap_seconds)
    pulled_first, pulled_second = [episode for episode in pulled if episode[0] == "mi300x-01/5"]
    assert second == pulled_second and first[2] == pulled_first[2] and first[3] < pulled_first[3]
    assert [e for e in judged if e[0] != "mi300x-01/5"] == [e for e in pulled if e[0] != "mi300x-01/5"]


def test_run_crossing_into_an_hour_with_activity_of_their_own(
    sessions: sessionmaker[Session], tsdb: TsdbLoader
) -> None:
    """Hour 1 as exporters before 1.3.1 (partition 0 alone has the activity), idle from minute 50; hour 2 after an
    upgrade, each partition its own activity, partition 0 idle to minute 10 and the others busy: the partitions' runs
    end at their own first reading of hour 2, as in the pull, and partition 0's goes on."""
    t0 = to_epoch(scenario.start_hour() - timedelta(days=1))
    lines = readings(t0) + readings(t0 + 3600, partition_activity=True)
    client = PrometheusClient(tsdb(_idle_partition_0(lines, lambda at: t0 + 3000 <= at < t0 + 4200)))
    pulled, judged = _pulled_and_judged(sessions, client, t0, 2, lambda session: _seed_whole(session, t0, 2))
    assert {(episode[2], episode[3]) for episode in pulled if episode[0] == "mi300x-01/3"} == {(3000, 3600)}
    assert judged == pulled
