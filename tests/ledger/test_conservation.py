"""The ledger's properties, tested with hypothesis: whatever the jobs, Σ teams + __unallocated__ equals the
GPUs' capacity cost (a collector's GPUs from their first reading on, the job import's placeholders while jobs held
them), exactly in the ledger and to the cent in the rounded report; a period split in two adds
up to the whole; recomputing every hour changes nothing; the team-hours are the ledger's sums."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from collector.contract.wire import IngestBatch
from finops.analysis.report import cost_report
from finops.analysis.report_format import report_dicts
from finops.db.engine import make_engine, session_factory, upgrade
from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour
from finops.db.models import Allocation, Base, Gpu
from finops.ingest.readings import Ingestor
from finops.jobs.slurm_import import import_sacct
from finops.ledger.costmodel import capacity_cost
from finops.ledger.rollup import rollup
from finops.ledger.team_hours import ledger_team_sums
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, to_epoch

T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
HOURS = 3
MODEL = "NVIDIA H100 80GB HBM3"

job = st.tuples(
    st.integers(min_value=0, max_value=HOURS * 60 - 1),  # start minute
    st.integers(min_value=1, max_value=HOURS * 60),  # duration in minutes (may run past the window)
    st.integers(min_value=1, max_value=3),  # GPUs
    st.sampled_from(["acct-a", "acct-b", "acct-c"]),
    st.booleans(),  # still running
)


def _line(number: int, start: int, minutes: int, gpus: int, account: str, running: bool) -> str:
    begin = T0 + timedelta(minutes=start)
    end = "Unknown" if running else (begin + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S")
    stamp = begin.strftime("%Y-%m-%dT%H:%M:%S")
    state = "RUNNING" if running else "COMPLETED"
    return f"{number}|{number}|c|gpu|{account}|u|{stamp}|{stamp}|{end}|00:01:00|{state}|gres/gpu={gpus}|n1|j"


def _assert_team_hours_sum_the_ledger(session: Session) -> None:
    sums = ledger_team_sums()
    from_ledger = select(LedgerEntry.hour, LedgerEntry.team_id, *sums.values()).group_by(
        LedgerEntry.hour, LedgerEntry.team_id
    )
    kept = select(LedgerTeamHour.hour, LedgerTeamHour.team_id, *(getattr(LedgerTeamHour, name) for name in sums))
    assert sorted(session.execute(kept).all()) == sorted(session.execute(from_ledger).all())


def _ledger_rows(session: Session) -> list[tuple[object, ...]]:
    columns = [c for c in LedgerEntry.__table__.columns if c.name != "id"]
    return sorted((tuple(row) for row in session.execute(select(*columns))), key=repr)


def _in_service(session: Session, gpu: Gpu, until: int) -> list[tuple[int, int]]:
    """A GPU's in-service stretches up to ``until``, disjoint: from its first reading on when a collector reported it,
    else (a placeholder of the job import) while jobs held it."""
    if gpu.uuid is not None:
        return [(to_epoch(gpu.in_service_from), until)]
    held = sorted(
        (to_epoch(a.start), until if a.end is None else min(to_epoch(a.end), until))
        for a in session.scalars(select(Allocation).where(Allocation.gpu_id == gpu.id))
    )
    merged: list[tuple[int, int]] = []
    for a, b in held:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job, max_size=8), pricing_model=st.sampled_from(list(PricingModel)))
def test_ledger_conserves_capacity_cost(tmp_path: Path, jobs: list[tuple[int, int, int, str, bool]],
                                        pricing_model: PricingModel) -> None:  # fmt: skip
    engine = make_engine(f"sqlite:///{tmp_path / 'conservation.sqlite'}")
    upgrade(engine)
    sessions = session_factory(engine)
    with sessions.begin() as session:
        for table in reversed(Base.metadata.sorted_tables):
            session.execute(table.delete())
    pricing = Pricing(load_catalog(), pricing_model)
    until = to_epoch(T0) + HOURS * HOUR
    gpus = [{"uuid": f"GPU-{i}", "index": i, "model": MODEL} for i in range(2)]
    batch = IngestBatch.model_validate(
        {"node": "n1", "gpus": gpus, "samples": [{"uuid": g["uuid"], "ts": T0, "utilization_ratio": 0.5} for g in gpus]}
    )
    with sessions.begin() as session:
        Ingestor().store(session, batch)
        import_sacct(session, [_line(100 + i, *spec) for i, spec in enumerate(jobs)], source="generated")
        rollup(session, pricing, until)
        expected = Decimal(0)
        expected_seconds = 0
        for gpu in session.scalars(select(Gpu)):
            rate = pricing.catalog.rate(MODEL, pricing_model, T0)
            stretches = _in_service(session, gpu, until)
            for hour in range(to_epoch(T0), until, HOUR):
                seconds = sum(max(0, min(hour + HOUR, b) - max(hour, a)) for a, b in stretches)
                expected += capacity_cost(rate, seconds) if seconds else Decimal(0)
                expected_seconds += seconds
        rows = cost_report(session, T0, T0 + timedelta(hours=HOURS), "team")
        halves = [
            cost_report(session, T0, T0 + timedelta(hours=1), "team"),
            cost_report(session, T0 + timedelta(hours=1), T0 + timedelta(hours=HOURS), "team"),
        ]
        ledger_before = _ledger_rows(session)
        _assert_team_hours_sum_the_ledger(session)
        mark_hours_dirty(session, range(to_epoch(T0), until, HOUR))
        rollup(session, pricing, until)
        assert _ledger_rows(session) == ledger_before, "recomputing a window changed the ledger"
        _assert_team_hours_sum_the_ledger(session)
    for team in {row.key for row in rows}:
        whole = next(row for row in rows if row.key == team)
        parts = [row for half in halves for row in half if row.key == team]
        for field in ("allocated_cost", "used_cost", "idle_cost", "allocated_gpu_seconds", "unmetered_gpu_seconds"):
            assert sum(getattr(part, field) for part in parts) == getattr(whole, field), (team, field)
    assert sum(row.allocated_cost for row in rows) == expected
    assert sum(row.allocated_gpu_seconds for row in rows) == expected_seconds
    for row in rows:
        assert row.used_cost + row.idle_cost <= row.allocated_cost
    rounded = report_dicts(rows, "team")
    assert sum(Decimal(str(r["allocated_cost"])) for r in rounded) == expected.quantize(Decimal("0.01"))
    engine.dispose()
