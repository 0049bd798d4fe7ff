"""Hardware activity from DCGM 4.6's cycle counters, from a real VictoriaMetrics and a real Prometheus holding an hour
of a hand-made dcgm-exporter fixture (tests/fixtures/dcgm/dcgm-4.6-cycles-hour.prom: a GPU with counters and ratio
fields, a GPU with counters only that starts in the hour and is reset in it, a GPU of an older DCGM with ratio
fields only): pulled into ``gpu_samples`` (:mod:`finops.ingest.prometheus_pull`) and metered by PromQL
(``FINOPS_TELEMETRY_SOURCE=tsdb``), the ledger's activity means are the hand-computed ones, counters win over ratio
fields where both are exported, a first reading and a reset give no value, and what nothing exports stays NULL."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import ACTIVITY_COLUMNS
from finops.db.ledger_tables import DirtyHour, LedgerEntry, LedgerTeamHour, TsdbGpuMetering
from finops.db.models import Gpu, GpuSample
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import PullOptions, import_range
from finops.ingest.tsdb_metering import TsdbMeter, cycle_sums
from finops.ledger.rollup import rollup
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.ledger.test_tsdb_activity import hold, ledger_activity
from tests.ledger.test_tsdb_metering import PRICING
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

FIXTURE = Path(__file__).parents[1] / "fixtures" / "dcgm" / "dcgm-4.6-cycles-hour.prom"
FIXTURE_HOUR = 1_767_607_200
"""2026-01-05 10:00 UTC, the hour the fixture's samples are stamped in (one scrape before it, at 09:55)."""
BOTH = "GPU-3b9d0e21-6a4f-4c1e-8d2b-7f5a9c0e4d10"
"""gpu-c-01 GPU 0: cycle counters and ratio fields; held by a job from 10:10 to 10:40."""
COUNTERS = "GPU-3b9d0e21-6a4f-4c1e-8d2b-7f5a9c0e4d11"
"""gpu-c-01 GPU 1: cycle counters only, from 10:00, reset between 10:25 and 10:30; held all hour."""
GAUGES = "GPU-a7c41d08-92e3-4b6f-b1d5-0e8f3a2c6b20"
"""gpu-d-01 GPU 0: ratio fields only (DCGM 3.3 names); held all hour."""
JOB = (10, 40)

_SAMPLE = re.compile(r"^(\S+\{[^}]*\}) (\S+) (\d+)$")

# Hand-computed from the fixture's header. From readings (the pull), each reading's activity is its interval's
# Δ active / Δ elapsed and the ledger averages the readings; from the TSDB, a segment's is Σ Δ active / Σ Δ elapsed
# over its intervals (weighted by cycles). With a steady clock the two are equal (the counters-only GPU); BOTH's
# clock alternates, so they differ.
#  BOTH, the job's readings 10:10 … 10:35: three intervals of 6e13 elapsed cycles, three of 8e13.
#    readings: SM (0.5 + 0.9) / 2 = 0.7, tensor (0.3 + 0.5) / 2 = 0.4, FP32 (0.2 + 0.1) / 2 = 0.15;
#    TSDB: SM (3·0.5·6 + 3·0.9·8) / (3·6 + 3·8) = 30.6 / 42, tensor (3·0.3·6 + 3·0.5·8) / 42 = 17.4 / 42,
#    FP32 (3·0.2·6 + 3·0.1·8) / 42 = 6 / 42. DRAM and graphics engine: the ratio fields, 0.33 and 0.99.
#  COUNTERS: 12 readings, none at 10:00 (first) and 10:30 (reset): 10 intervals of 8e13; SM 5 × 0.25 and 5 × 0.75
#    = 0.5, tensor 0.1, either way; profiled 10 of 12 readings = 3000 s.
#  GAUGES: 12 readings; SM (0.4 + 0.6) / 2, FP32 (0.1 + 0.3) / 2, tensor 0.2, DRAM 0.3, graphics engine 0.85.
_SAME = {
    COUNTERS: {"sm_active_ratio": 0.5, "tensor_active_ratio": 0.1},
    GAUGES: {
        "sm_active_ratio": 0.5, "tensor_active_ratio": 0.2, "dram_active_ratio": 0.3, "fp32_active_ratio": 0.2,
        "graphics_engine_active_ratio": 0.85,
    },
}  # fmt: skip
FROM_READINGS = {
    BOTH: {"sm_active_ratio": 0.7, "tensor_active_ratio": 0.4, "fp32_active_ratio": 0.15,
           "dram_active_ratio": 0.33, "graphics_engine_active_ratio": 0.99},
    **_SAME,
}  # fmt: skip
FROM_TSDB = {
    BOTH: {"sm_active_ratio": 30.6 / 42, "tensor_active_ratio": 17.4 / 42, "fp32_active_ratio": 6 / 42,
           "dram_active_ratio": 0.33, "graphics_engine_active_ratio": 0.99},
    **_SAME,
}  # fmt: skip
PROFILED_SECONDS = {BOTH: 1800, COUNTERS: 3000, GAUGES: HOUR}


def fixture_lines(hour: int) -> list[str]:
    """The fixture's samples as exposition lines with their times moved from :data:`FIXTURE_HOUR` to ``hour``."""
    lines = []
    for line in FIXTURE.read_text().splitlines():
        if (found := _SAMPLE.match(line)) is not None:
            series, value, ms = found.groups()
            lines.append(f"{series} {value} {int(ms) + (hour - FIXTURE_HOUR) * 1000}")
    return lines


def assert_means(rows: dict[tuple[str, bool], LedgerEntry], expected: dict[str, dict[str, float]]) -> None:
    """Each GPU's job row has the expected means, every other activity NULL, and its profiled seconds."""
    for uuid, means in expected.items():
        row = rows[uuid, True]
        for column in ACTIVITY_COLUMNS:
            if column in means:
                assert getattr(row, column) == pytest.approx(means[column], rel=1e-12), (uuid, column)
            else:
                assert getattr(row, column) is None, (uuid, column)
        assert row.profiled_seconds == PROFILED_SECONDS[uuid], uuid
        assert row.sm_active_cost is not None and row.sm_active_cost > 0, uuid


def test_cycle_counters_pulled_and_metered_from_the_tsdb(sessions: sessionmaker[Session], tsdb: TsdbLoader) -> None:
    hour = to_epoch(scenario.start_hour() - timedelta(days=2))
    client = PrometheusClient(tsdb(fixture_lines(hour)))
    options = PullOptions(step_seconds=300)
    pulled = import_range(sessions, client, from_epoch(hour), from_epoch(hour + HOUR), options)
    assert pulled.gpus == {BOTH, COUNTERS, GAUGES}
    assert pulled.readings == 3 * 12
    with sessions.begin() as session:
        stored = {
            (uuid, to_epoch(ts) - hour): sm
            for uuid, ts, sm in session.execute(
                select(Gpu.uuid, GpuSample.ts, GpuSample.sm_active_ratio).join(Gpu, Gpu.id == GpuSample.gpu_id)
            )
        }
        # The counters-only GPU: no value at its first reading nor across the reset (never 0).
        assert stored[COUNTERS, 0] is None and stored[COUNTERS, 1800] is None
        assert stored[COUNTERS, 300] == 0.25 and stored[COUNTERS, 2100] == 0.75
        # Counters and ratio fields: the counters' mean, not the ratio field's 0.95, from the first reading on.
        assert stored[BOTH, 0] == 0.5 and stored[BOTH, 300] == 0.9

        hold(session, hour, {BOTH: JOB})
        rollup(session, PRICING, hour + HOUR)
        assert_means(ledger_activity(session), FROM_READINGS)

        for model in (LedgerEntry, LedgerTeamHour, GpuSample, DirtyHour):
            session.execute(delete(model))
        rollup(session, PRICING, hour + HOUR, meter=TsdbMeter(client, options))
        assert_means(ledger_activity(session), FROM_TSDB)
        # The job cuts BOTH's hour in three segments; the counters count its intervals, 10:10 … 10:35 in the job's.
        segments = {
            (uuid, to_epoch(s.start) - hour): (s.samples, s.profiled, s.sm_active_n, s.dram_active_n)
            for uuid, s in session.execute(
                select(Gpu.uuid, TsdbGpuMetering).join(Gpu, Gpu.id == TsdbGpuMetering.gpu_id)
            )
        }
        assert segments[BOTH, 600] == (6, 6, 6, 6)
        assert segments[COUNTERS, 0] == (12, 10, 10, 0)
        assert segments[GAUGES, 0] == (12, 12, 12, 12)


def test_cycle_sums_leave_out_resets_gaps_and_disagreeing_counters() -> None:
    elapsed = [(0, 100.0), (10, 200.0), (20, 50.0), (30, 150.0), (40, 150.0), (50, 250.0), (5000, 350.0)]
    active = [(0, 10.0), (10, 60.0), (20, 5.0), (30, 25.0), (40, 25.0), (50, 200.0), (5000, 360.0)]
    # 0→10: 50 of 100; 10→20: reset; 20→30: 20 of 100; 30→40: no growth; 40→50: 175 of 100, more than elapsed;
    # 50→5000: longer than an hour.
    assert cycle_sums(elapsed, active, 0) == (70.0, 200.0, 2)
    assert cycle_sums(elapsed, active, 15) == (20.0, 100.0, 1), "intervals ending before a are left out"
    assert cycle_sums(elapsed, [(0, 10.0), (20, 5.0)], 0) == (0.0, 0.0, 0), "an active reading at both ends"
