"""The scheduler's rollup commits a backlog two days at a time: a rollup stopped after its first transaction keeps
the hours that transaction rebuilt (ledger rows and idle episodes), leaves the others marked, and the next rollup
finishes the ledger a single transaction would have built; the ledger's watermark moves only once nothing is left."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

import finops.service.scheduler as scheduler
from finops.analysis.idle import IdlePolicy
from finops.db.hours import LEDGER_WATERMARK, mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Allocation, Gpu, GpuSample, Job, Node, Team, Watermark
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.ledger.rollup import TRANSACTION_HOURS, rollup
from finops.ledger.sql import LEDGER_COLUMNS
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch, to_epoch

H100 = "NVIDIA H100 80GB HBM3"
T0 = to_epoch(datetime(2026, 10, 5, tzinfo=UTC))
DAYS = 4
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)


def _store(sessions: sessionmaker[Session]) -> None:
    """Two GPUs read every 2 minutes for four days, one held by a job all along, idle half of each day."""
    with sessions.begin() as session:
        team, node = Team(name="alpha"), Node(hostname="n1")
        session.add_all([team, node])
        session.flush()
        gpus = [
            Gpu(uuid=f"GPU-{i}", node_id=node.id, gpu_index=i, model=H100, in_service_from=from_epoch(T0))
            for i in range(2)
        ]
        job = Job(
            scheduler="slurm", cluster="c", job_id="1", job_id_raw="1", user="u", account="a", partition="p",
            name="j", state="RUNNING", start=from_epoch(T0), end=None, gpus=1, node_list="n1", team_id=team.id,
        )  # fmt: skip
        session.add_all([*gpus, job])
        session.flush()
        session.add(Allocation(job_pk=job.id, gpu_id=gpus[0].id, start=from_epoch(T0), end=None))
        samples: list[dict[str, Any]] = [
            {"gpu_id": gpu.id, "ts": ts, "utilization_ratio": 0.0 if (ts - T0) % 86400 < 43200 else 0.875,
             "energy_joules": 1e6 + (ts - T0) * 300.0}
            for gpu in gpus
            for ts in range(T0, T0 + DAYS * 86400, 120)
        ]  # fmt: skip
        if is_partitioned(session.connection()):
            create_partitions(session.connection(), {s["ts"] for s in samples})
        session.execute(GpuSample.__table__.insert(), samples)  # type: ignore[attr-defined]


def _ledger(session: Session) -> list[tuple[Any, ...]]:
    columns = [getattr(LedgerEntry, name) for name in LEDGER_COLUMNS]
    return [tuple(row) for row in session.execute(select(*columns).order_by(*columns[:3]))]


def test_a_stopped_rollup_keeps_what_it_committed_and_the_next_finishes(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    _store(sessions)
    until = T0 + DAYS * 86400
    monkeypatch.setattr(scheduler, "utc_now", lambda: from_epoch(until))
    judged: list[int] = []
    real_rejudge = scheduler.rejudge_idle

    def rejudge_then_stop(session: Session, hours: Any, *args: Any) -> int:
        if judged:
            raise KeyboardInterrupt  # stopped in the second transaction
        judged.append(len(hours))
        return real_rejudge(session, hours, *args)

    monkeypatch.setattr(scheduler, "rejudge_idle", rejudge_then_stop)
    with pytest.raises(KeyboardInterrupt):
        scheduler.run_rollup(sessions, PRICING, IdlePolicy())
    assert judged == [TRANSACTION_HOURS]
    with sessions() as session:
        hours = session.scalar(select(func.count(func.distinct(LedgerEntry.hour))))
        assert hours == TRANSACTION_HOURS
        assert session.scalar(text("SELECT COUNT(*) FROM idle_episodes")) > 0
        assert session.get(Watermark, LEDGER_WATERMARK) is None
    monkeypatch.setattr(scheduler, "rejudge_idle", real_rejudge)
    built, _ = scheduler.run_rollup(sessions, PRICING, IdlePolicy())
    assert built.pending_hours == 0
    with sessions() as session:
        finished = _ledger(session)
        episodes = session.execute(text('SELECT gpu_id, start, "end" FROM idle_episodes ORDER BY 1, 2')).all()
        assert session.get(Watermark, LEDGER_WATERMARK) is not None
    assert len({row[0] for row in finished}) == DAYS * 24
    with sessions.begin() as session:
        for table in ("gpu_hour_metering", "metering_cursors", "metered_holdings", "ledger", "ledger_team_hours"):
            session.execute(text(f"DELETE FROM {table}"))
        mark_hours_dirty(session, range(T0, until, HOUR))
        rollup(session, PRICING, until)
        assert _ledger(session) == finished
        scheduler.rejudge_idle(session, range(T0, until, HOUR), IdlePolicy(), PRICING)
        assert session.execute(text('SELECT gpu_id, start, "end" FROM idle_episodes ORDER BY 1, 2')).all() == episodes
