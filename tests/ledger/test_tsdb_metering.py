"""The ledger metered by PromQL from a real VictoriaMetrics and a real Prometheus (``FINOPS_TELEMETRY_SOURCE=tsdb``)
equals the ledger metered from the same readings stored in the database: per-team cost to the cent, utilisation
within 1e-6, energy within 1e-6 J; no raw rows in ``gpu_samples`` in the TSDB mode."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import ACTIVITY_COLUMNS, IngestBatch, gpu_info_dict, reading_dict
from finops.db.ledger_tables import DirtyHour, LedgerEntry, LedgerTeamHour, TsdbGpuMetering
from finops.db.models import Allocation, Gpu, GpuSample, Job, Team
from finops.ingest.prometheus import PrometheusClient
from finops.ingest.prometheus_pull import ACTIVITY_METRICS
from finops.ingest.promql_select import window
from finops.ingest.readings import Ingestor
from finops.ingest.tsdb_metering import ACTIVITY_FIELDS, TsdbMeter, counter_increase
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import to_epoch
from tests.support import scenario
from tests.support.prometheus_server import TsdbLoader

PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)


def exposition(readings: list[Sample], node: str) -> list[str]:
    """The readings as dcgm-exporter would export them (its units: %, mJ, MiB), timestamps in ms."""
    lines = []
    for s in readings:
        labels = f'Hostname="{node}",gpu="{s.labels["gpu"]}",UUID="{s.labels["uuid"]}",modelName="{s.labels["model"]}"'
        ms = int(s.timestamp.timestamp() * 1000)
        values = {
            "DCGM_FI_DEV_GPU_UTIL": s.values[m.GPU_UTILIZATION] * 100,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": s.values[m.GPU_ENERGY] * 1000,
            "DCGM_FI_DEV_FB_USED": s.values[m.GPU_MEMORY_USED] / 2**20,
        } | {ACTIVITY_FIELDS[activity][0]: s.values[metric] for metric, activity in ACTIVITY_METRICS.items()
             if metric in s.values}  # fmt: skip
        lines += [f"{name}{{{labels}}} {value!r} {ms}" for name, value in values.items()]
    return lines


def ledger(session: Session) -> dict[tuple[object, ...], tuple[object, ...]]:
    """Ledger rows by (hour, GPU, job, team): seconds, samples, used GPU-seconds, energy, the activity means (a
    tuple, None where unmeasured), then exact: money (the SM-active cost last) and profiled seconds."""
    return {
        (r.hour, r.gpu_id, r.job_pk, r.team_id): (
            r.seconds, r.sample_count, r.used_gpu_seconds, r.energy_joules,
            tuple(getattr(r, column) for column in ACTIVITY_COLUMNS), r.allocated_cost, r.used_cost, r.idle_cost,
            r.sm_active_cost, r.profiled_seconds,
        )
        for r in session.scalars(select(LedgerEntry))
    }  # fmt: skip


def team_costs(session: Session) -> dict[str, tuple[Decimal, Decimal]]:
    """(allocated, used) cost per team, rounded to cents."""
    rows = session.execute(
        select(Team.name, func.sum(LedgerEntry.allocated_cost), func.sum(LedgerEntry.used_cost))
        .join(Team, Team.id == LedgerEntry.team_id)
        .group_by(Team.name)
    )
    return {name: (Decimal(a).quantize(Decimal("0.01")), Decimal(u).quantize(Decimal("0.01"))) for name, a, u in rows}


def test_window_selects_a_half_open_segment_to_the_millisecond() -> None:
    assert window(3600, 7200) == "[3600s] @ 7199.999"


def test_counter_increase_counts_a_reset_and_skips_long_gaps() -> None:
    points = [(0.0, 10.0), (60.0, 20.0), (120.0, 5.0), (180.0, 8.0), (5000.0, 100.0)]
    assert counter_increase(points, 60) == 10 + 5 + 3
    assert counter_increase(points, 121) == 3


@pytest.mark.parametrize("offset_ms", [0, -300], ids=["whole-seconds", "sub-second"])
def test_scenario_metered_from_the_tsdb_equals_the_direct_path(
    sessions: sessionmaker[Session], tsdb: TsdbLoader, offset_ms: int
) -> None:
    """Readings at whole seconds, or 0.3 s before them, as Prometheus stamps scrapes (to the millisecond): then
    just before each hour and each job's start or end, in the second before it, where the database puts them."""
    t0 = scenario.start_hour()
    until = to_epoch(t0 + timedelta(hours=2))
    readings = [replace(s, timestamp=s.timestamp + timedelta(milliseconds=offset_ms)) for s in scenario.samples(t0)]
    url = tsdb(exposition(readings, scenario.NODE))
    batch = IngestBatch.model_validate(
        {"node": scenario.NODE, "gpus": [gpu_info_dict(s) for s in readings[:2]],
         "samples": [reading_dict(s) for s in readings]}
    )  # fmt: skip
    with sessions.begin() as session:
        map_account(session, "acct-a", "alpha", actor="system:test")
        Ingestor().store(session, batch)
        import_sacct(session, scenario.sacct_lines(t0), source="scenario")
        compare_modes(session, PrometheusClient(url), until)


DAY_GPUS = 3


def day_readings(t0: datetime) -> list[Sample]:
    """A day of 1-minute readings of 3 GPUs from ``t0``: utilisation varying by the minute (idle runs where it
    falls to 0 %), an energy counter of 30 kJ a minute that GPU 2's driver resets at 10:17, one minute missing, and
    GPU 2 silent for 63 minutes (09:16 to 10:18) across the reset: the first increment after the silence spans more
    than an hour, so it counts for nothing. Hardware activity, values written by hand (varying by the minute):
    GPU 0 reports SM, SM occupancy, tensor, DRAM, FP16 and graphics engine activity all day; GPU 1 only DRAM and
    graphics engine activity, from 06:10 on (profiling turned on mid-hour); GPU 2 none."""
    readings = []
    for minute in range(24 * 60):
        for index in range(DAY_GPUS):
            if (index == 1 and minute == 200) or (index == 2 and 556 <= minute < 618):
                continue
            percent = 0 if 300 <= minute < 400 else (minute * 7 + index * 13) % 101
            energy = 30_000.0 * minute + 1e9 * index
            if index == 2 and minute >= 617:
                energy = 30_000.0 * (minute - 617)
            values = {
                m.GPU_UTILIZATION: percent / 100,
                m.GPU_ENERGY: energy,
                m.GPU_MEMORY_USED: 2.0**30 * (index + 1),
            }
            activity = ((minute * 11 + index * 5) % 97) / 100
            if index == 0:
                values |= {m.GPU_SM_ACTIVE: activity, m.GPU_SM_OCCUPANCY: activity / 2, m.GPU_TENSOR_ACTIVE: 0.25,
                           m.GPU_DRAM_ACTIVE: 1 - activity, m.GPU_FP16_ACTIVE: activity / 4,
                           m.GPU_GRAPHICS_ENGINE_ACTIVE: min(1.0, activity + 0.03)}  # fmt: skip
            elif index == 1 and minute >= 370:
                values |= {m.GPU_DRAM_ACTIVE: activity / 3, m.GPU_GRAPHICS_ENGINE_ACTIVE: activity}
            labels = {
                "gpu": str(index),
                "uuid": f"GPU-dddddddd-0000-0000-0000-00000000000{index}",
                "model": scenario.MODEL,
            }
            readings.append(Sample("gpu", labels, values, t0 + timedelta(minutes=minute)))
    return readings


Holding = tuple[int, int, int | None]
"""(GPU index, start minute, end minute or None: still running) of one job of team delta on node gpu-d-01."""


def seed_day(session: Session, t0: datetime, readings: list[Sample], holdings: list[Holding]) -> None:
    """Store the day's ``readings`` of node gpu-d-01 through ingest, and one job of team delta per holding, each
    ending 30 s after its end minute (so that holdings split their hours)."""
    batch = IngestBatch.model_validate(
        {"node": "gpu-d-01", "gpus": [gpu_info_dict(s) for s in readings[:DAY_GPUS]],
         "samples": [reading_dict(s) for s in readings]}
    )  # fmt: skip
    Ingestor().store(session, batch)
    team = Team(name="delta")
    session.add(team)
    session.flush()
    gpus = {g.gpu_index: g for g in session.scalars(select(Gpu))}
    for number, (index, start, end) in enumerate(holdings):
        job = Job(
            scheduler="slurm", cluster="c", job_id=str(900 + number), job_id_raw=str(900 + number), user="u",
            account="a", partition="p", name="j", state="RUNNING", start=t0 + timedelta(minutes=start), end=None,
            gpus=1, node_list="gpu-d-01", team_id=team.id,
        )  # fmt: skip
        session.add(job)
        session.flush()
        session.add(
            Allocation(
                job_pk=job.id, gpu_id=gpus[index].id, start=t0 + timedelta(minutes=start),
                end=None if end is None else t0 + timedelta(minutes=end, seconds=30),
            )
        )  # fmt: skip
    session.flush()


def test_a_day_with_partial_hours_and_a_counter_reset_equals_the_direct_path(
    sessions: sessionmaker[Session], tsdb: TsdbLoader
) -> None:
    t0 = scenario.start_hour() - timedelta(days=2)
    until = to_epoch(t0 + timedelta(days=1))
    readings = day_readings(t0)
    url = tsdb(exposition(readings, "gpu-d-01"))
    with sessions.begin() as session:
        # Jobs starting and ending mid-hour, one after another on GPU 0, one running on GPU 1 from 05:20.
        seed_day(session, t0, readings, [(0, 35, 190), (0, 190, 725), (1, 320, None), (2, 0, 1000)])
        compare_modes(session, PrometheusClient(url), until)
        held = session.scalars(select(LedgerEntry).where(LedgerEntry.job_pk.is_not(None))).all()
        # GPU 1's 06:00 hour: 50 of its 60 readings profiled; GPU 2 never.
        assert {0, 3000, 3600} <= {row.profiled_seconds for row in held}
        assert any(row.sm_active_cost for row in held) and any(row.sm_active_cost is None for row in held)


def compare_modes(session: Session, client: PrometheusClient, until: int) -> None:
    """Roll up from the database's readings, then again from the TSDB with no readings in the database: the
    same ledger rows, team costs to the cent, utilisation within 1e-6 and energy within 1e-6 J."""
    rollup(session, PRICING, until)
    direct, direct_teams = ledger(session), team_costs(session)
    for model in (LedgerEntry, LedgerTeamHour, GpuSample, DirtyHour):
        session.execute(delete(model))
    rollup(session, PRICING, until, meter=TsdbMeter(client))
    assert session.scalar(select(func.count()).select_from(GpuSample)) == 0
    assert session.scalar(select(func.count()).select_from(TsdbGpuMetering)) > 0
    metered, metered_teams = ledger(session), team_costs(session)
    assert metered_teams == direct_teams
    assert metered.keys() == direct.keys()
    for key, row in direct.items():
        other = metered[key]
        assert other[:2] == row[:2], key
        assert other[2] == pytest.approx(row[2], abs=1e-6 * 3600), key
        assert other[3] == pytest.approx(row[3], abs=1e-6), key
        assert [mean is None for mean in other[4]] == [mean is None for mean in row[4]], key
        assert [mean for mean in other[4] if mean is not None] == pytest.approx(
            [mean for mean in row[4] if mean is not None], abs=1e-9
        ), key
        assert other[5:] == row[5:], key
