"""Each reading is metered once: two hours of readings arriving in 5-minute parts through ingest, a rollup after
each, give the ledger a cold rebuild of the same data gives, row for row and to the last bit, on both databases —
with a job added in an hour already metered, a job ended early, a GPU time-sliced mid-hour, profiling data that
starts mid-hour, an energy counter reset, and readings of one GPU that arrive late (after later ones were metered).
A quiet rollup meters exactly the readings that arrived since the one before."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from collector.contract.wire import GpuInfo, GpuSeries, IngestBatch
from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Allocation, Gpu, Team
from finops.ingest.readings import Ingestor
from finops.ledger.rollup import rollup
from finops.ledger.rollup_result import RollupResult
from finops.ledger.sql import LEDGER_COLUMNS
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch, to_epoch
from tests.support.holdings import hold

H100 = "NVIDIA H100 80GB HBM3"
T0 = to_epoch(datetime(2026, 10, 5, 10, tzinfo=UTC))
END = T0 + 2 * HOUR
PART = 300
STEP = 10
GPUS = 4
LATE = range(T0 + 1200, T0 + 1500, STEP)
"""GPU 0's readings of [T0 + 20 min, T0 + 25 min): held back, then sent after the readings of the next hour."""
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)


def _utilization(gpu: int, ts: int) -> float:
    """A ratio with no short binary expansion (three decimals), different per GPU and instant."""
    return ((ts // STEP) * 7919 + gpu * 104729) % 1000 / 1000


def _energy(gpu: int, ts: int) -> float | None:
    """GPU 0's counter, 350.123 J a second, reset at T0 + 50 min; no reading at T0 + 70 min; other GPUs, 0.1 J more
    a second per index."""
    if gpu == 0 and ts == T0 + 4200:
        return None
    base = 1e7 + (ts - T0) * (350.123 + gpu / 10)
    return base - 1e7 - 1049.0 * 350.123 if gpu == 0 and ts >= T0 + 3000 else base


def _batch(instants: range, gpus: range = range(GPUS)) -> IngestBatch:
    """Node n1's readings at ``instants`` of ``gpus``; GPU 1 carries SM activity from T0 + 80 min on."""
    series = []
    for gpu in gpus:
        fields: dict[str, Any] = {
            "utilization_ratio": [_utilization(gpu, ts) for ts in instants],
            "energy_joules": [_energy(gpu, ts) for ts in instants],
        }
        if gpu == 1:
            fields["sm_active_ratio"] = [None if ts < T0 + 4800 else _utilization(gpu + 7, ts) / 2 for ts in instants]
        series.append(GpuSeries(uuid=f"GPU-{gpu}", ts=list(instants), **fields))
    infos = [GpuInfo(uuid=f"GPU-{gpu}", index=gpu, model=H100) for gpu in range(GPUS)]
    return IngestBatch(node="n1", gpus=infos, series=series)


def _ledger(session: Session) -> list[tuple[Any, ...]]:
    columns = [getattr(LedgerEntry, name) for name in LEDGER_COLUMNS]
    return [tuple(row) for row in session.execute(select(*columns).order_by(*columns[:3]))]


def test_readings_metered_once_give_the_ledger_of_a_cold_rebuild(sessions: sessionmaker[Session]) -> None:
    ingestor = Ingestor()
    with sessions.begin() as session:
        ingestor.store(session, _batch(range(T0, T0 + STEP, STEP)))
    with sessions.begin() as session:
        team = Team(name="alpha")
        session.add(team)
        session.flush()
        gpu = {g.gpu_index: g.id for g in session.scalars(select(Gpu))}
        long_job = hold(session, team, gpu[0], "long", T0 - HOUR, None)
        hold(session, team, gpu[1], "late-start", T0 + 1234, None)
        hold(session, team, gpu[2], "first", T0, T0 + 5000)
        hold(session, team, gpu[2], "sliced", T0 + 4000, T0 + 4600)  # overlaps "first": GPU 2's second hour shared
    results: list[tuple[int, RollupResult]] = []
    stored = GPUS  # the first instant's readings, stored above
    for part in range(1, 2 * HOUR // PART + 1):
        lo, hi = T0 + (part - 1) * PART, T0 + part * PART
        instants = range(max(lo, T0 + STEP), hi, STEP)
        with sessions.begin() as session:
            ingestor.store(session, _batch(instants, range(1, GPUS)))
            held_back = [ts for ts in instants if ts in LATE]
            if not held_back:
                ingestor.store(session, _batch(instants, range(1)))
            else:
                sent = [ts for ts in instants if ts not in LATE]
                if sent:
                    ingestor.store(session, _batch(range(sent[0], sent[-1] + STEP, STEP), range(1)))
        stored += len(instants) * GPUS - len(held_back)
        with sessions.begin() as session:
            if part == 14:  # the held-back readings arrive, 50 minutes late
                ingestor.store(session, _batch(LATE, range(1)))
                stored += len(LATE)
            if part == 9:  # a job imported late into the first hour, on the GPU no one held
                hold(session, team, gpu[3], "imported", T0 + 900, T0 + 1800)
                mark_hours_dirty(session, [T0])
            if part == 20:  # the long job ended earlier than the rollups saw it running
                session.execute(
                    update(Allocation).where(Allocation.id == long_job.id).values(end=from_epoch(T0 + 5555))
                )
                mark_hours_dirty(session, [T0 + HOUR])
            results.append((part, rollup(session, PRICING, hi + 7)))
    late = {part: result.late_gpus for part, result in results if result.late_gpus}
    assert late == {14: 1}
    # A rollup with nothing late and no holdings changed reads the readings new since the one before, no others.
    quiet = [result.readings_metered for part, result in results if part in (2, 3, 7, 17, 18)]
    assert quiet == [PART // STEP * GPUS] * 5
    with sessions() as session:
        incremental = _ledger(session)
        assert session.scalar(text("SELECT COUNT(*) FROM reading_arrivals")) == 0
    with sessions.begin() as session:
        for table in ("gpu_hour_metering", "metering_cursors", "metered_holdings", "ledger", "ledger_team_hours"):
            session.execute(text(f"DELETE FROM {table}"))
        mark_hours_dirty(session, [T0, T0 + HOUR])
        cold = rollup(session, PRICING, END + 7)
    assert cold.readings_metered == stored == 2 * HOUR // STEP * GPUS
    with sessions() as session:
        assert _ledger(session) == incremental
        assert len(incremental) >= 2 * GPUS


@pytest.mark.parametrize("parts", [1, 12])
def test_a_price_change_recosts_hours_without_reading_a_reading(sessions: sessionmaker[Session], parts: int) -> None:
    """Hours marked dirty with nothing changed but the prices (a catalogue import) are re-costed from the kept sums:
    the rollup reads no reading, and writes the rows it wrote before."""
    ingestor = Ingestor()
    step = HOUR // parts
    for part in range(parts):
        with sessions.begin() as session:
            ingestor.store(session, _batch(range(T0 + part * step, T0 + (part + 1) * step, STEP)))
            rollup(session, PRICING, T0 + (part + 1) * step)
    with sessions() as session:
        before = _ledger(session)
    with sessions.begin() as session:
        mark_hours_dirty(session, [T0])
        again = rollup(session, PRICING, T0 + HOUR)
    assert again.readings_metered == 0
    with sessions() as session:
        assert _ledger(session) == before
