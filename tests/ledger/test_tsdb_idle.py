"""Idle episodes judged on readings read from a real VictoriaMetrics or Prometheus equal those judged on the same
readings in ``gpu_samples``: start and end within one step (60 s), the same job, memory flag and cost to the cent;
the readings read are those of the half-open period, each in the second the database puts it in."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from finops.analysis.idle import IdlePolicy, detect_idle
from finops.db.models import Gpu, GpuSample, IdleEpisode, Job
from finops.ingest.prometheus import PrometheusClient, RangeSeries
from finops.ingest.prometheus_pull import PullOptions, field_scale
from finops.ingest.promql_select import raw_readings
from finops.ingest.tsdb_idle import kept
from finops.ingest.tsdb_metering import MEMORY_FIELD
from finops.ingest.tsdb_source import TsdbTelemetry
from finops.timeutil import from_epoch, to_epoch
from tests.ledger.test_tsdb_metering import DAY_GPUS, PRICING, day_readings, exposition, seed_day
from tests.ledger.test_tsdb_queries import CountingClient
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

STEP = 60
UTILIZATION = PullOptions().utilization_fields[0]


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
    [((30, 150), 1.0), ((30, 60), 0.0), ((290, 420), 0.05)],
    ids=["every-gpu", "only-gpu-2-reads-0", "idle-for-100-minutes"],
)
def test_idle_readings_are_the_low_tsdb_readings_of_the_half_open_period_and_their_neighbours(
    sessions: sessionmaker[Session], tsdb: TsdbLoader, minutes: tuple[int, int], threshold: float
) -> None:
    """The readings at or below the threshold and those just before and after each: all of them at 100 %; at 0 %,
    from 00:30 to 01:00, GPU 2's at 00:54 and its neighbours (GPU 0 reads 0 % at 00:00 and 01:41, GPU 1 at 00:27 and
    02:08); from 04:50 to 07:00, the 100 minutes at 0 % of each GPU from 05:00 on, which span many slices, and the
    few low ones around them."""
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
    expected = []
    for uuid, gpu_id in sorted(by_uuid.items(), key=lambda item: item[1]):
        period = {to_epoch(s.timestamp): s.values for s in readings if s.labels["uuid"] == uuid
                  and start <= to_epoch(s.timestamp) < end}  # fmt: skip
        utilization = {ts: values[m.GPU_UTILIZATION] for ts, values in period.items()}
        expected += [(gpu_id, ts, utilization[ts], period[ts][m.GPU_MEMORY_USED])
                     for ts in kept(sorted(period), utilization, threshold)]  # fmt: skip
    low = {row[0] for row in expected if row[2] <= threshold}
    assert len(low) == (1 if threshold == 0 else 3)
    assert [row[:2] for row in found] == [row[:2] for row in expected]
    values = [value for row in found for value in row[2:]]
    assert values == pytest.approx([value for row in expected for value in row[2:]], abs=1e-9)


def test_kept_readings_are_the_low_ones_and_their_neighbours() -> None:
    times = [0, 60, 120, 180, 240, 300, 400]
    values = dict(zip(times, [0.9, 0.0, 0.9, 0.9, 0.5, 0.03, 0.9], strict=True))
    assert kept(times, values, 0.05) == [0, 60, 120, 240, 300, 400]
    assert kept(times, values, 0.0) == [0, 60, 120]
    assert kept(times, values, 1.0) == times
    assert kept([], {}, 0.05) == []


class EveryReading:
    """Every raw reading of the period of every GPU the database knows (a :class:`ReadingSource`), as the TSDB
    holds them: what idle detection judged before only the low readings and their neighbours were read."""

    def __init__(self, client: PrometheusClient) -> None:
        self.client = client

    def idle_readings(
        self, session: Session, start: int, end: int, threshold: float
    ) -> list[tuple[int, int, float, float | None]]:
        by_uuid = {gpu.uuid: gpu.id for gpu in session.scalars(select(Gpu))}
        values: dict[str, dict[tuple[int, int], float]] = {name: {} for name in (UTILIZATION, MEMORY_FIELD)}
        for name, found in values.items():
            for series in raw_readings(self.client, name, start, end):
                gpu_id = by_uuid[series.labels["UUID"]]
                found.update({(gpu_id, int(ts)): value * field_scale(name) for ts, value in series.points})
        memory = values[MEMORY_FIELD]
        return [(gpu_id, ts, u, memory.get((gpu_id, ts))) for (gpu_id, ts), u in sorted(values[UTILIZATION].items())]


def silent_readings(t0: datetime) -> list[Sample]:
    """Six hours of 1-minute readings of 3 GPUs from ``t0`` (GPU 1's 0.3 s before the minute), busy at 60-90 %
    but: GPU 0 at 0 % from 01:40 to 02:50, across slices; GPU 1 at 2 % from 02:00 to 02:30, then silent for
    25 minutes, then at 0 % until 03:20, and once at 0 % at 03:50 after 10 silent minutes; GPU 2 at 3 % (idle at
    5 %, not at 1 %) from 03:20 to 04:00, then at 0 % until 04:40 but at 90 % every seventh minute, then at 0 %
    until 05:00 and silent for 10 minutes (the reading after its last idle one lies in no slice with a low
    reading, past the margin read around them)."""
    readings = []
    for minute in range(6 * 60):
        for index in range(DAY_GPUS):
            if (index == 1 and (150 <= minute < 175 or 220 <= minute < 230)) or (index == 2 and 300 <= minute < 310):
                continue
            percent = 60 + (minute * 7 + index) % 31
            if (index == 0 and 100 <= minute < 170) or (index == 1 and (175 <= minute < 200 or minute == 230)):
                percent = 0
            elif index == 1 and 120 <= minute < 150:
                percent = 2
            elif index == 2 and 200 <= minute < 240:
                percent = 3
            elif index == 2 and 240 <= minute < 300 and (minute >= 280 or minute % 7):
                percent = 0
            stamp = t0 + timedelta(minutes=minute, milliseconds=-300 if index == 1 else 0)
            labels = {"gpu": str(index), "uuid": f"GPU-dddddddd-0000-0000-0000-00000000000{index}",
                      "model": scenario.MODEL}  # fmt: skip
            values = {m.GPU_UTILIZATION: percent / 100, m.GPU_ENERGY: 30_000.0 * minute,
                      m.GPU_MEMORY_USED: 2.0**30 * (index + 1 + minute % 3)}  # fmt: skip
            readings.append(Sample("gpu", labels, values, stamp))
    return readings


def test_idle_episodes_judged_on_the_kept_readings_equal_those_judged_on_every_reading(
    sessions: sessionmaker[Session], tsdb: TsdbLoader
) -> None:
    """The same episodes, to the second, with the same memory flag, cost, reason and evidence, at both thresholds
    (GPU 2's job is in a partition idle at 1 %), across slices and silences longer than the max gap; fewer
    readings are read, and the fleet's low slices (five minutes) are found in one range query per utilisation series."""
    t0 = scenario.start_hour() - timedelta(days=2)
    readings = silent_readings(t0)
    url = tsdb(exposition(readings, "gpu-d-01"))
    policy = IdlePolicy(window_seconds=600, grace_seconds=0, partition_thresholds={"interactive": 0.01})
    start, end = t0 + timedelta(minutes=61), t0 + timedelta(minutes=335)
    with sessions.begin() as session:
        seed_day(session, t0, readings, [(0, 0, None), (1, 0, None), (2, 0, None)])
        session.execute(update(Job).where(Job.job_id == "902").values(partition="interactive"))
        session.execute(delete(GpuSample))
        judged = {}
        for name, source in (("every", EveryReading(PrometheusClient(url))),
                             ("kept", TsdbTelemetry(client := CountingClient(url)))):  # fmt: skip
            detect_idle(session, start, end, policy, PRICING, source)
            judged[name] = sorted(
                (e.gpu_id, e.job_pk, to_epoch(e.start), to_epoch(e.end), e.memory_held, e.cost, e.reason, e.evidence)
                for e in session.scalars(select(IdleEpisode))
            )
            session.execute(delete(IdleEpisode))
        every = EveryReading(PrometheusClient(url)).idle_readings(session, to_epoch(start), to_epoch(end), 0.05)
        read = TsdbTelemetry(PrometheusClient(url)).idle_readings(session, to_epoch(start), to_epoch(end), 0.05)
    assert judged["kept"] == judged["every"]
    assert len({gpu_id for gpu_id, *_ in judged["every"]}) == DAY_GPUS and len(judged["every"]) >= 4
    assert set(read) < set(every)
    # One range query per utilisation series (dcgm-exporter's, AMD's exporter's) for the 55 slices.
    assert sum("min_over_time" in query for query, _ in client.asked) == 2


class AligningClient(CountingClient):
    """A client whose range queries a query frontend aligns to their step (Thanos'
    ``--query-range.align-range-with-step``): start and end moved down to multiples of it."""

    def query_range(
        self, query: str, start: datetime, end: datetime, step_seconds: float, exact: bool = False
    ) -> list[RangeSeries]:
        def aligned(at: datetime) -> datetime:
            return from_epoch(int(at.timestamp() // step_seconds * step_seconds))

        return super().query_range(query, aligned(start), aligned(end), step_seconds, exact)


def test_idle_readings_are_the_same_where_range_queries_are_aligned_to_their_step(
    sessions: sessionmaker[Session], tsdb: TsdbLoader, caplog: pytest.LogCaptureFixture
) -> None:
    """The slices (five minutes) with a low reading are then asked instant by instant, and that is logged."""
    t0 = scenario.start_hour() - timedelta(days=2)
    readings = silent_readings(t0)
    url = tsdb(exposition(readings, "gpu-d-01"))
    # Slices from 01:01:07: not multiples of their 300 s.
    start, end = to_epoch(t0) + 3667, to_epoch(t0) + 335 * 60
    with sessions.begin() as session:
        seed_day(session, t0, readings, [])
        plain = TsdbTelemetry(PrometheusClient(url)).idle_readings(session, start, end, 0.05)
        client = AligningClient(url)
        assert TsdbTelemetry(client).idle_readings(session, start, end, 0.05) == plain
    assert len(plain) > 100
    assert "slices are asked one by one" in caplog.text
    assert any("label_replace(min_over_time(" in query for query, _ in client.asked)
