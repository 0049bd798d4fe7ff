"""Hardware activity in the ledger: per GPU-hour and holder, the seconds metered with profiling readings, each
activity's mean over the readings that carry it, and the SM-active cost; unmeasured stays NULL on both costing
paths and both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import IngestBatch
from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour, ProfiledHour
from finops.db.models import Gpu
from finops.ingest.readings import Ingestor
from finops.jobs.slurm_import import import_sacct
from finops.ledger.costmodel import used_cost
from finops.ledger.rollup import rollup
from finops.ledger.team_hours import ledger_team_sums
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, to_epoch

H = 1_793_613_600  # 2026-11-02T10:00Z
MODEL = "NVIDIA H100 80GB HBM3"
STEP = 10


def _stamp(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _sacct(number: int, start: int, end: int) -> str:
    """A completed two-GPU job on node n1 over [start, end) (``sacct -P`` line as the importer reads it)."""
    return (f"{number}|{number}|c|gpu|acct-a|u|{_stamp(start)}|{_stamp(start)}|{_stamp(end)}|00:01:00|COMPLETED|"
            "gres/gpu=2|n1|train")  # fmt: skip


def _activity(ts: int) -> dict[str, float]:
    """GPU-0's activity at ``ts``: distinct values per field and instant, so that a mean over the wrong readings
    shows."""
    k = (ts - H) // STEP
    return {
        "sm_active_ratio": round(0.2 + (k % 7) / 20, 3),
        "tensor_active_ratio": round((k % 5) / 10, 3),
        "dram_active_ratio": 0.5,
    }


def _profiled(ts: int) -> bool:
    """GPU-0 reports activity in the first half of hour H and from H + 1 h on; never in hour H + 2 h."""
    return (H <= ts < H + 1800) or (H + HOUR <= ts < H + 2 * HOUR)


def _batch() -> IngestBatch:
    """Node n1, GPUs 0 and 1 read every 10 s over three hours; GPU-0 carries activity where :func:`_profiled`,
    GPU-1 never."""
    instants = list(range(H, H + 3 * HOUR, STEP))
    gpus = [{"uuid": f"GPU-{i}", "index": i, "model": MODEL} for i in range(2)]
    series = [
        {"uuid": "GPU-0", "ts": instants, "utilization_ratio": [1.0] * len(instants),
         **{name: [(_activity(ts)[name] if _profiled(ts) else None) for ts in instants]
            for name in ("sm_active_ratio", "tensor_active_ratio", "dram_active_ratio")}},
        {"uuid": "GPU-1", "ts": instants, "utilization_ratio": [0.75] * len(instants)},
    ]  # fmt: skip
    return IngestBatch.model_validate({"node": "n1", "gpus": gpus, "series": series})


def _mean(values: list[float]) -> object:
    """The mean of ``values``, compared to 1e-12: the database sums in its own order."""
    return pytest.approx(sum(values) / len(values), rel=1e-12)


def _rows(session: Session) -> list[tuple[object, ...]]:
    columns = [c for c in LedgerEntry.__table__.columns if c.name != "id"]
    return sorted((tuple(row) for row in session.execute(select(*columns))), key=repr)


def test_activity_means_profiled_seconds_and_sm_active_cost(sessions: sessionmaker[Session]) -> None:
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    until = H + 3 * HOUR
    with sessions.begin() as session:
        Ingestor().store(session, _batch())
        # Job 100 holds both GPUs all of hour H (the SQL costing's common case); job 101 the first half of H + 1 h
        # (split by the Python cost model); job 102 all of H + 2 h, when nothing is profiled.
        import_sacct(
            session,
            [_sacct(100, H, H + HOUR), _sacct(101, H + HOUR, H + HOUR + 1800), _sacct(102, H + 2 * HOUR, until)],
            source="test",
        )
        rollup(session, pricing, until)
    with sessions() as session:
        marked = {to_epoch(h) for h in session.scalars(select(ProfiledHour.hour))}
        assert marked == {H, H + HOUR, H + 2 * HOUR}, "ingest marks the hours of a batch that carries activity"
        ids = {uuid: gpu_id for uuid, gpu_id in session.execute(select(Gpu.uuid, Gpu.id))}
        ledger = {
            (to_epoch(row.hour), row.gpu_id, row.job_pk is not None): row
            for row in session.scalars(select(LedgerEntry))
        }
        sql_rows = _rows(session)

    first_half = [_activity(ts) for ts in range(H, H + 1800, STEP)]
    held = ledger[H, ids["GPU-0"], True]
    assert held.profiled_seconds == 1800, "180 of the hour's 360 readings carried activity"
    assert held.sm_active_ratio == _mean([a["sm_active_ratio"] for a in first_half])
    assert held.tensor_active_ratio == _mean([a["tensor_active_ratio"] for a in first_half])
    assert held.dram_active_ratio == 0.5
    assert held.sm_occupancy_ratio is None and held.fp32_active_ratio is None, "never reported: NULL, not 0"
    assert held.allocated_cost is not None
    assert held.sm_active_cost == used_cost(held.allocated_cost, held.sm_active_ratio)

    unprofiled = ledger[H, ids["GPU-1"], True]
    assert unprofiled.profiled_seconds == 0 and unprofiled.sm_active_ratio is None
    assert unprofiled.sm_active_cost is None, "no SM activity: no SM-active cost (not 0)"
    assert unprofiled.used_cost is not None and unprofiled.used_cost > 0

    split = ledger[H + HOUR, ids["GPU-0"], True]
    job_readings = [_activity(ts) for ts in range(H + HOUR, H + HOUR + 1800, STEP)]
    assert split.seconds == 1800 and split.profiled_seconds == 1800
    assert split.sm_active_ratio == _mean([a["sm_active_ratio"] for a in job_readings])
    assert split.sm_active_cost == used_cost(split.allocated_cost or 0, split.sm_active_ratio)
    rest = ledger[H + HOUR, ids["GPU-0"], False]
    assert rest.profiled_seconds == 0 and rest.sm_active_ratio is None, "unallocated time keeps no activity"

    last = ledger[H + 2 * HOUR, ids["GPU-0"], True]
    assert last.profiled_seconds == 0 and last.sm_active_ratio is None and last.sm_active_cost is None

    with sessions.begin() as session:
        sums = ledger_team_sums()
        from_ledger = select(LedgerEntry.hour, LedgerEntry.team_id, *sums.values()).group_by(
            LedgerEntry.hour, LedgerEntry.team_id
        )
        kept = select(LedgerTeamHour.hour, LedgerTeamHour.team_id, *(getattr(LedgerTeamHour, n) for n in sums))
        assert sorted(session.execute(kept).all()) == sorted(session.execute(from_ledger).all())
        mark_hours_dirty(session, range(H, until, HOUR))
        rollup(session, pricing, until, sql_costing=False)
    with sessions() as session:
        assert _rows(session) == sql_rows, "the Python cost model writes the rows the SQL costing wrote"
