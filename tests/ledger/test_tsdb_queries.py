"""What metering an hour from a real VictoriaMetrics and a real Prometheus asks of it grows with the GPUs and their
segments, not with their product: each segment cut inside the hour is asked for the GPUs cut there only, and the
segments are packed into queries of at most :data:`~finops.ingest.promql_select.MAX_QUERY_CHARS` characters."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import GpuInfo
from finops.db.models import Allocation, Gpu, Job, Node, Team
from finops.ingest.prometheus import InstantSample, PrometheusClient, RangeSeries
from finops.ingest.prometheus_pull import PullOptions
from finops.ingest.promql_select import MAX_QUERY_CHARS, uuid_groups, uuid_matcher
from finops.ingest.readings import Ingestor
from finops.ingest.tsdb_metering import ACTIVITY_FIELDS, TsdbMeter
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.ledger.test_tsdb_metering import exposition
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

GPUS_PER_NODE = 8
STATISTICS = 7
"""Readings, Σ utilisation, memory held, and the energy counter's last, first, last before and resets."""
ROUNDS = 2
"""The metering's rounds of queries: the statistics of every segment, then those that depend on them."""
ACTIVITY_NAMES = [name for names in ACTIVITY_FIELDS.values() for name in names]


class CountingClient(PrometheusClient):
    """A client that records each query it sends and how many series the TSDB answered to it."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.asked: list[tuple[str, int]] = []

    def query(self, query: str, at: datetime) -> list[InstantSample]:
        found = super().query(query, at)
        self.asked.append((query, len(found)))
        return found

    def samples(self, query: str, at: datetime) -> list[RangeSeries]:
        found = super().samples(query, at)
        self.asked.append((query, len(found)))
        return found

    def query_range(
        self, query: str, start: datetime, end: datetime, step_seconds: float, exact: bool = False
    ) -> list[RangeSeries]:
        found = super().query_range(query, start, end, step_seconds, exact)
        self.asked.append((query, len(found)))
        return found


def uuid(index: int) -> str:
    return f"GPU-eeeeeeee-0000-0000-0000-{index:012d}"


def fleet_readings(gpus: int, hour: int) -> list[tuple[str, Sample]]:
    """(node, reading) of ``gpus`` GPUs, 8 a node, every minute of the hour before ``hour`` (epoch start) and of it."""
    return [
        (
            f"gpu-q-{index // GPUS_PER_NODE:02d}",
            Sample(
                "gpu",
                {"gpu": str(index % GPUS_PER_NODE), "uuid": uuid(index), "model": scenario.MODEL},
                {
                    m.GPU_UTILIZATION: (minute * 7 + index) % 101 / 100,
                    m.GPU_ENERGY: 20_000.0 * (minute + 60),
                    m.GPU_MEMORY_USED: 2.0**30,
                },
                from_epoch(hour + minute * 60),
            ),
        )
        for minute in range(-60, 60)
        for index in range(gpus)
    ]


def meter_fleet(sessions: sessionmaker[Session], tsdb: TsdbLoader, gpus: int) -> tuple[list[tuple[str, int]], int]:
    """Meter hour H of ``gpus`` GPUs from a TSDB holding their readings: the even ones held by one job all hour, each
    odd one by a job starting at its own second inside H (so that the hour has ``gpus / 2`` distinct bounds).
    Returns the queries sent with the series answered to each, and the segments written; the database is left as
    it was."""
    hour = to_epoch(scenario.start_hour()) - 2 * HOUR
    readings = fleet_readings(gpus, hour)
    nodes = sorted({node for node, _ in readings})
    url = tsdb([line for node in nodes for line in exposition([s for n, s in readings if n == node], node)])
    client = CountingClient(url)
    with sessions() as session:
        team = Team(name="queries")
        session.add(team)
        session.flush()
        for node in nodes:
            infos = [
                GpuInfo(uuid=s.labels["uuid"], index=int(s.labels["gpu"]), model=s.labels["model"])
                for n, s in readings[:gpus]
                if n == node
            ]
            Ingestor().register(session, node, infos, {info.uuid: hour - HOUR for info in infos})
        placed = session.execute(select(Gpu.id, Gpu.uuid, Node.hostname).join(Node, Node.id == Gpu.node_id))
        for gpu_id, gpu_uuid, hostname in sorted(placed, key=lambda row: row.uuid):
            index = int(gpu_uuid.rsplit("-", 1)[1])
            start = hour - HOUR if index % 2 == 0 else hour + 60 * index + 7
            job = Job(
                scheduler="slurm", cluster="c", job_id=str(index), job_id_raw=str(index), user="u", account="a",
                partition="p", name="j", state="RUNNING", start=from_epoch(start), end=None, gpus=1,
                node_list=hostname, team_id=team.id,
            )  # fmt: skip
            session.add(job)
            session.flush()
            session.add(Allocation(job_pk=job.id, gpu_id=gpu_id, start=from_epoch(start), end=None))
        session.flush()
        written = TsdbMeter(client).meter_hours(session, [hour], hour + HOUR)
        session.rollback()
    return client.asked, written


def test_uuid_groups_keep_each_matcher_within_half_a_query() -> None:
    uuids = [uuid(index) for index in range(500)]
    groups = uuid_groups(uuids)
    assert [u for group in groups for u in group] == uuids
    assert len(groups) > 1
    matchers = [uuid_matcher(PullOptions(), group) for group in groups]
    assert all(len(matcher) <= MAX_QUERY_CHARS // 2 + len('UUID=~""') for matcher in matchers)
    assert matchers[0].startswith(f'UUID=~"{uuid(0)}|{uuid(1)}|')
    assert uuid_matcher(PullOptions(), ["GPU-a.b"]) == 'UUID="GPU-a.b"'
    assert uuid_matcher(PullOptions(), ["GPU-a.b", "c|d"]) == 'UUID=~"GPU-a\\\\.b|c\\\\|d"'


def test_an_hour_asks_the_tsdb_in_proportion_to_the_gpus(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    """Twice the GPUs and twice the bounds: the TSDB answers twice the series (each segment's statistics of its own
    GPUs, and the whole hour's of every GPU), where asking each bound of every GPU would answer four times as many;
    and the queries are as many as their text needs: none longer than the limit, and of each of the two rounds (the
    statistics, then those depending on them) all but the last more than half full. The activity fields, which these
    GPUs do not export, are asked once each for the whole hour and never again."""
    small, small_rows = meter_fleet(sessions, tsdb, 16)
    large, large_rows = meter_fleet(sessions, tsdb, 32)
    # The even GPUs' whole hour and the odd GPUs' two segments.
    assert (small_rows, large_rows) == (16 // 2 * 3, 32 // 2 * 3)
    answered = [sum(series for _, series in asked) for asked in (small, large)]
    assert answered == [STATISTICS * 2 * 16, STATISTICS * 2 * 32]
    for asked in small, large:
        assert all(len(query) <= MAX_QUERY_CHARS for query, _ in asked)
        assert sum(len(query) <= MAX_QUERY_CHARS // 2 for query, _ in asked) <= ROUNDS
        text = " ".join(query for query, _ in asked)
        assert all(text.count(f"count_over_time({name}[") == 1 for name in ACTIVITY_NAMES)
        assert all(f"sum_over_time({name}" not in text for name in ACTIVITY_NAMES)
    assert len(small) <= STATISTICS
    assert len(small) < len(large) <= 2 * len(small)
