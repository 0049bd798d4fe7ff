"""The rollup on GPUs read every second, with and without the energy counter: the ledger a hand computation gives,
and work (SQLite virtual machine instructions, not time) that grows linearly with the readings and not with the
readings outside the hours rebuilt."""

from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.engine import make_engine, session_factory, upgrade
from finops.db.hours import mark_hours_dirty
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Allocation, Gpu, GpuSample, Job, Node, Team
from finops.ingest.partitions import create_partitions, is_partitioned
from finops.ledger.rollup import rollup
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.timeutil import HOUR, from_epoch

H100 = "NVIDIA H100 80GB HBM3"
T0 = 1_790_812_800  # 2026-10-01T00:00Z
WATTS = 400.0
PRICING = Pricing(load_catalog(), PricingModel.ON_DEMAND)


def _counter(ts: int) -> float:
    """The energy counter of the GPU that has one: 400 J a second since T0."""
    return 1e9 + (ts - T0) * WATTS


def _utilization(ts: int) -> float:
    """0.25 and 0.75 on alternate seconds: a mean of 0.5 over any whole hour."""
    return 0.25 if ts % 2 == 0 else 0.75


def _store(sessions: sessionmaker[Session], seconds: int, step: int = 1) -> dict[str, int]:
    """Two GPUs in service from T0, each held by its own job all along, read every ``step`` seconds for ``seconds``
    (utilisation :func:`_utilization`, power 400 W): ``counter`` with the energy counter (:func:`_counter`), ``none``
    without. Returns their ids by those names."""
    with sessions.begin() as session:
        team = Team(name="alpha")
        node = Node(hostname="n1")
        session.add_all([team, node])
        session.flush()
        gpus = {
            name: Gpu(uuid=f"GPU-{name}", node_id=node.id, gpu_index=index, model=H100, in_service_from=from_epoch(T0))
            for index, name in enumerate(("counter", "none"))
        }
        jobs = {
            name: Job(
                scheduler="slurm", cluster="c", job_id=name, job_id_raw=name, user="u", account="a", partition="p",
                name="j", state="RUNNING", start=from_epoch(T0), end=None, gpus=1, node_list="n1", team_id=team.id,
            )
            for name in gpus
        }  # fmt: skip
        session.add_all([*gpus.values(), *jobs.values()])
        session.flush()
        session.add_all(
            Allocation(job_pk=jobs[name].id, gpu_id=gpu.id, start=from_epoch(T0), end=None)
            for name, gpu in gpus.items()
        )
        samples: list[dict[str, Any]] = [
            {
                "gpu_id": gpu.id,
                "ts": ts,
                "utilization_ratio": _utilization(ts),
                "power_watts": WATTS,
                "energy_joules": _counter(ts) if name == "counter" else None,
            }
            for name, gpu in gpus.items()
            for ts in range(T0, T0 + seconds, step)
        ]
        if is_partitioned(session.connection()):
            create_partitions(session.connection(), {T0, T0 + seconds - 1})
        session.execute(GpuSample.__table__.insert(), samples)  # type: ignore[attr-defined]
        return {name: gpu.id for name, gpu in gpus.items()}


def test_gpus_read_every_second_with_and_without_a_counter_match_the_hand_computation(
    sessions: sessionmaker[Session],
) -> None:
    """Two hours of 1-second readings: each GPU-hour is its job's, 3,600 readings at a mean utilisation of 0.5, so
    half the allocated cost is used; the GPU with a counter has 400 J for each increment (3,599 in the first hour,
    whose first reading has no earlier one; 3,600 in the second), the GPU without one no energy at all."""
    ids = _store(sessions, 2 * HOUR)
    with sessions.begin() as session:
        rollup(session, PRICING, T0 + 2 * HOUR)
    rate = PRICING.catalog.rate(H100, PricingModel.ON_DEMAND, from_epoch(T0))
    tariff = PRICING.catalog.tariff_per_kwh * PRICING.catalog.pue
    with sessions() as session:
        rows = {(r.gpu_id, r.hour): r for r in session.scalars(select(LedgerEntry))}
    assert len(rows) == 4
    for (gpu_id, hour), row in rows.items():
        increments = 0 if gpu_id == ids["none"] else 3599 if hour == from_epoch(T0) else 3600
        joules = increments * WATTS
        assert (row.seconds, row.sample_count, row.used_gpu_seconds) == (3600, 3600, 1800.0)
        assert row.allocated_cost == rate.quantize(Decimal("0.000001"), ROUND_HALF_EVEN)
        assert row.used_cost == (rate / 2).quantize(Decimal("0.000001"), ROUND_HALF_EVEN)
        assert row.idle_cost == row.allocated_cost - row.used_cost
        assert row.energy_joules == joules
        expected_energy = Decimal(int(joules)) / Decimal(3_600_000) * tariff
        assert row.energy_cost == expected_energy.quantize(Decimal("0.000001"), ROUND_HALF_EVEN)


def _add_job(session: Session, gpu_id: int, start: int, end: int) -> None:
    """A job of its own team holding GPU ``gpu_id`` over [start, end) (epoch seconds)."""
    team = Team(name="beta")
    session.add(team)
    session.flush()
    job = Job(
        scheduler="slurm", cluster="c", job_id="late", job_id_raw="late", user="u", account="a", partition="p",
        name="j", state="COMPLETED", start=from_epoch(start), end=from_epoch(end), gpus=1, node_list="n1",
        team_id=team.id,
    )  # fmt: skip
    session.add(job)
    session.flush()
    session.add(Allocation(job_pk=job.id, gpu_id=gpu_id, start=from_epoch(start), end=from_epoch(end)))


def _counting_engine(path: Path) -> tuple[Engine, Callable[[], int]]:
    """A migrated SQLite engine on ``path`` whose connections count their virtual machine instructions (by the
    hundred, through SQLite's progress handler), and a function that returns the count so far and restarts it."""
    engine = make_engine(f"sqlite:///{path}")
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0  # go on

    @event.listens_for(engine, "connect")
    def _count(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_progress_handler(tick, 100)

    def taken() -> int:
        done, steps[0] = steps[0], 0
        return done

    upgrade(engine)
    return engine, taken


def _rollup_steps(path: Path, seconds: int, step: int, dirty: int | None = None) -> int:
    """Instructions (by the hundred) of a rollup to the end of ``seconds`` of readings every ``step`` seconds
    (:func:`_store`) in a new SQLite database on ``path``: into the empty ledger, or with ``dirty`` an hour (epoch
    seconds) in which a job is added after that (ten minutes on the GPU without a counter, beside the job holding
    it: its readings must be metered again), the rollup that rebuilds that hour (and the newest)."""
    engine, taken = _counting_engine(path)
    try:
        sessions = session_factory(engine)
        ids = _store(sessions, seconds, step)
        if dirty is not None:
            with sessions.begin() as session:
                rollup(session, PRICING, T0 + seconds)
                _add_job(session, ids["none"], dirty + 600, dirty + 1200)
                mark_hours_dirty(session, [dirty])
        taken()
        with sessions.begin() as session:
            rollup(session, PRICING, T0 + seconds)
        return taken()
    finally:
        engine.dispose()


def test_rollup_work_grows_linearly_with_the_readings(tmp_path: Path) -> None:
    """The rollup of 4 hours of 1-second readings (a GPU with the counter, one without) into an empty ledger takes
    at most 1.25 × 4 times the instructions of 1 hour's (a metering step that searched the chunk's readings once
    per reading of a GPU without a counter took 16 times as many)."""
    one, four = (_rollup_steps(tmp_path / f"{hours}h.sqlite", hours * HOUR, 1) for hours in (1, 4))
    assert four <= 1.25 * 4 * one, (one, four)


def test_rebuilding_an_hour_takes_the_same_work_however_many_days_are_stored(tmp_path: Path) -> None:
    """Rebuilding one dirty hour whose readings are metered again (and the newest) takes at most 1.05 × the
    instructions with 4 days of 10-second readings stored as with 1 day (a metering step that scanned every stored
    reading for each chunk took 1.2 times as many, and more with every day stored)."""
    one, four = (
        _rollup_steps(tmp_path / f"{days}d.sqlite", days * 24 * HOUR, 10, dirty=T0 + 12 * HOUR) for days in (1, 4)
    )
    assert four <= 1.05 * one, (one, four)
