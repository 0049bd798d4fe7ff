"""Raw samples by day: PostgreSQL partitions through migration 0003 and back, made on demand by concurrent
ingest, expired by the retention job (on both databases) without touching the ledger or dirty hours."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from collector.contract.wire import IngestBatch
from finops.cli import app
from finops.cli import db as db_commands
from finops.db.engine import downgrade, make_engine, session_factory, upgrade
from finops.db.ledger_tables import DirtyHour, LedgerEntry
from finops.db.models import Base, Gpu, GpuSample, Node, Team
from finops.ingest.partitions import DAY, floor_day, include_name, partition_name, prune_samples
from finops.ingest.readings import Ingestor
from finops.service import scheduler
from finops.service.scheduler import run_sample_maintenance
from finops.timeutil import to_epoch, utc_now

MODEL = "NVIDIA H100 80GB HBM3"
TODAY = floor_day(to_epoch(utc_now()))
"""The UTC day the tests were collected on, for tests that give the code under test its ``now`` themselves."""

only_postgres = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@pytest.fixture
def today(monkeypatch: pytest.MonkeyPatch) -> int:
    """The start of the current UTC day (epoch seconds), the clock of the sample maintenance and of ``finops db``
    stopped at this instant: the test and the code under test agree on "today" even across midnight."""
    now = utc_now()
    monkeypatch.setattr(scheduler, "utc_now", lambda: now)
    monkeypatch.setattr(db_commands, "utc_now", lambda: now)
    return floor_day(to_epoch(now))


def _uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index:04d}"


def _batch(node: str, instants: list[int], gpus: int = 1) -> IngestBatch:
    """A node's columnar batch: ``gpus`` GPUs, each read at every instant (epoch seconds)."""
    return IngestBatch.model_validate(
        {
            "node": node,
            "gpus": [{"uuid": _uuid(node, i), "index": i, "model": MODEL} for i in range(gpus)],
            "series": [
                {"uuid": _uuid(node, i), "ts": instants, "utilization_ratio": [0.5] * len(instants)}
                for i in range(gpus)
            ],
        }
    )


def _store(sessions: sessionmaker[Session], batch: IngestBatch, ingestor: Ingestor | None = None) -> int:
    with sessions.begin() as session:
        return (ingestor or Ingestor()).store(session, batch)


def _partitions(engine: Engine) -> dict[str, int]:
    """Partition of gpu_samples (from pg_inherits) → its row count."""
    with engine.connect() as connection:
        names = connection.execute(
            text("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                 "WHERE i.inhparent = 'gpu_samples'::regclass")
        ).scalars().all()  # fmt: skip
        return {name: connection.execute(text(f'SELECT count(*) FROM "{name}"')).scalar_one() for name in names}


def _relkind(engine: Engine) -> str:
    with engine.connect() as connection:
        return str(
            connection.execute(text("SELECT relkind FROM pg_class WHERE oid = 'gpu_samples'::regclass")).scalar()
        )


def _samples(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)) or 0)


def _models_match_migrations(engine: Engine) -> None:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"include_name": include_name})
        assert compare_metadata(context, Base.metadata) == []


def _ledger_row(sessions: sessionmaker[Session], hour: int) -> None:
    """One ledger row for the first GPU at ``hour``: the retention must leave it alone."""
    with sessions.begin() as session:
        team = Team(name="alpha")
        session.add(team)
        session.flush()
        gpu_id = session.scalars(select(Gpu.id).order_by(Gpu.id)).first()
        zero = Decimal("0")
        session.add(
            LedgerEntry(
                hour=datetime.fromtimestamp(hour, UTC), gpu_id=gpu_id, job_pk=None, team_id=team.id, seconds=3600,
                used_gpu_seconds=1800.0, sample_count=360, energy_joules=1.0, allocated_cost=Decimal("2.5"),
                used_cost=Decimal("1.25"), idle_cost=Decimal("1.25"), energy_cost=zero, currency="USD",
            )
        )  # fmt: skip


@only_postgres
def test_samples_by_day_through_upgrade_retention_downgrade_and_upgrade(database_url: str) -> None:
    engine = make_engine(database_url)
    sessions = session_factory(engine)
    day_a, day_b, day_c = TODAY - 40 * DAY, TODAY - 37 * DAY, TODAY - DAY
    upgrade(engine, "0002")
    with engine.begin() as connection:  # rows in the plain table of migration 0002
        connection.execute(text("INSERT INTO nodes (hostname) VALUES ('gpu-a-01')"))
        connection.execute(
            text("INSERT INTO gpus (uuid, node_id, gpu_index, model, in_service_from) "
                 "SELECT :uuid, id, 0, :model, :t FROM nodes"),
            {"uuid": _uuid("gpu-a-01", 0), "model": MODEL, "t": day_a},
        )  # fmt: skip
        connection.execute(
            text("INSERT INTO gpu_samples (gpu_id, ts, utilization_ratio) "
                 "SELECT g.id, s.ts, 0.5 FROM gpus g, (VALUES (:a1), (:a2), (:b1)) AS s(ts)"),
            {"a1": day_a + 60, "a2": day_a + DAY - 10, "b1": day_b + 3600},
        )  # fmt: skip
        connection.execute(text("INSERT INTO ledger_dirty_hours (hour) VALUES (:a), (:b)"),
                           {"a": day_a, "b": day_b + 3600})  # fmt: skip

    upgrade(engine)
    assert _relkind(engine) == "p"
    assert _partitions(engine) == {partition_name(day_a): 2, partition_name(day_b): 1}

    # Ingest makes the third day's partition; a replay of day A's rows adds nothing.
    assert _store(sessions, _batch("gpu-a-01", [day_c + 10 * i for i in range(6)])) == 6
    assert _store(sessions, _batch("gpu-a-01", [day_a + 60])) == 1
    partitions = {partition_name(day_a): 2, partition_name(day_b): 1, partition_name(day_c): 6}
    assert _partitions(engine) == partitions
    _models_match_migrations(engine)
    _ledger_row(sessions, day_a)

    now = datetime.fromtimestamp(TODAY + 12 * 3600, UTC)
    with sessions.begin() as session:  # every old day still has a dirty hour: nothing goes
        assert prune_samples(session, 30, now).partitions == ()
    with sessions.begin() as session:  # day A's hours rebuilt: its partition goes, day B's dirty hour keeps B
        session.execute(delete(DirtyHour).where(DirtyHour.hour < datetime.fromtimestamp(day_b, UTC)))
    with sessions.begin() as session:
        pruned = prune_samples(session, 30, now)
    assert pruned.partitions == (partition_name(day_a),)
    assert pruned.before == datetime.fromtimestamp(day_b, UTC)
    del partitions[partition_name(day_a)]
    assert _partitions(engine) == partitions
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(LedgerEntry)) == 1, "the ledger is kept"

    downgrade(engine, "0002")
    assert _relkind(engine) == "r"
    assert _partitions(engine) == {}
    with engine.connect() as connection:
        kept = connection.execute(text("SELECT ts FROM gpu_samples ORDER BY ts")).scalars().all()
        constraints = set(
            connection.execute(
                text("SELECT conname FROM pg_constraint WHERE conrelid = 'gpu_samples'::regclass")
            ).scalars()
        )
    assert kept == [day_b + 3600, *(day_c + 10 * i for i in range(6))]
    assert constraints == {"pk_gpu_samples", "fk_gpu_samples_gpu_id_gpus"}

    upgrade(engine)
    assert _partitions(engine) == partitions
    _models_match_migrations(engine)
    engine.dispose()


def test_retention_keeps_dirty_hours_and_the_ledger(sessions: sessionmaker[Session]) -> None:
    old, older, recent = TODAY - 36 * DAY, TODAY - 40 * DAY, TODAY - DAY
    for day in (older, old, recent):
        _store(sessions, _batch("gpu-a-01", [day + 600, day + 4200], gpus=2))
    _ledger_row(sessions, older)
    now = datetime.fromtimestamp(TODAY + 3600, UTC)

    with sessions.begin() as session:
        kept = prune_samples(session, 35, now)
    assert kept.before == datetime.fromtimestamp(older - DAY, UTC), "the oldest dirty hour's day and the hour before"
    assert _samples(sessions) == 12

    with sessions.begin() as session:
        session.execute(delete(DirtyHour))
    with sessions.begin() as session:
        pruned = prune_samples(session, 35, now)
    assert pruned.before == datetime.fromtimestamp(TODAY - 35 * DAY, UTC)
    if pruned.rows is None:  # PostgreSQL: whole days
        assert pruned.partitions == (partition_name(older), partition_name(old))
    else:
        assert pruned.rows == 8
    with sessions() as session:
        left = session.scalars(select(GpuSample.ts).order_by(GpuSample.ts)).all()
        assert session.scalar(select(func.count()).select_from(LedgerEntry)) == 1
    assert [to_epoch(ts) for ts in left] == [recent + 600, recent + 600, recent + 4200, recent + 4200]
    with sessions.begin() as session, pytest.raises(ValueError, match="at least 1 day"):
        prune_samples(session, 0, now)


def test_daily_maintenance_makes_the_coming_days_and_prunes(
    engine: Engine, sessions: sessionmaker[Session], today: int
) -> None:
    _store(sessions, _batch("gpu-a-01", [today - 50 * DAY]))
    with sessions.begin() as session:
        session.execute(delete(DirtyHour))
    pruned = run_sample_maintenance(sessions, 35)
    assert _samples(sessions) == 0
    if engine.dialect.name == "postgresql":
        assert pruned.partitions == (partition_name(today - 50 * DAY),)
        assert set(_partitions(engine)) == {partition_name(today + i * DAY) for i in range(3)}


def test_prune_samples_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, today: int) -> None:
    url = f"sqlite:///{tmp_path / 'finops.sqlite'}"
    engine = make_engine(url)
    upgrade(engine)
    sessions = session_factory(engine)
    _store(sessions, _batch("gpu-a-01", [today - 3 * DAY, today - 2 * DAY, today]))
    with sessions.begin() as session:
        session.execute(delete(DirtyHour))
    monkeypatch.setenv("FINOPS_DATABASE_URL", url)
    monkeypatch.setenv("FINOPS_SAMPLE_RETENTION_DAYS", "1")
    result = CliRunner().invoke(app, ["db", "prune-samples"])
    assert result.exit_code == 0, result.output
    midnight = datetime.fromtimestamp(today - DAY, UTC).isoformat()
    assert f"samples before {midnight} removed: 2 rows" in result.output
    result = CliRunner().invoke(app, ["db", "prune-samples", "--retention-days", "3"])
    assert "removed: 0 rows" in result.output
    assert _samples(sessions) == 1
    engine.dispose()


def _wait_for_lock_wait(engine: Engine, locktype: str) -> None:
    """Until another backend waits for a lock of ``locktype`` (pg_locks); fails after 30 s."""
    deadline = time.monotonic() + 30
    with engine.connect() as connection:
        while not connection.execute(
            text("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = :kind"), {"kind": locktype}
        ).scalar():
            assert time.monotonic() < deadline, f"no backend came to wait for a {locktype} lock"
            time.sleep(0.05)


def _race(sessions: sessionmaker[Session], first: IngestBatch, second: IngestBatch, locktype: str) -> None:
    """``first`` stored and left uncommitted while another process (a second Ingestor, its own connection)
    stores ``second`` and comes to wait on ``locktype``; then ``first`` commits and ``second`` must succeed."""
    errors: list[BaseException] = []
    engine = sessions.kw["bind"]

    def other() -> None:
        try:
            _store(sessions, second, Ingestor())
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    with sessions() as session:
        Ingestor().store(session, first)
        thread = threading.Thread(target=other)
        thread.start()
        _wait_for_lock_wait(engine, locktype)
        session.commit()
    thread.join(timeout=60)
    assert not thread.is_alive() and errors == []


@only_postgres
def test_two_workers_making_the_same_new_day_both_succeed(sessions: sessionmaker[Session]) -> None:
    day = TODAY + 5 * DAY  # no partition yet
    _race(sessions, _batch("gpu-a-01", [day + 60]), _batch("gpu-b-01", [day + 120]), "advisory")
    assert _samples(sessions) == 2
    assert _partitions(sessions.kw["bind"]) == {partition_name(day): 2}


@only_postgres
def test_two_collectors_registering_the_same_new_gpu_both_succeed(sessions: sessionmaker[Session]) -> None:
    _store(sessions, _batch("gpu-z-99", [TODAY + 60]))  # the day's partition exists: only the GPU is new
    first, second = _batch("gpu-a-01", [TODAY + 60], gpus=8), _batch("gpu-a-01", [TODAY + 120], gpus=8)
    _race(sessions, first, second, "transactionid")
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Node).where(Node.hostname == "gpu-a-01")) == 1
        assert session.scalar(select(func.count()).select_from(Gpu)) == 9
    assert _samples(sessions) == 17


@only_postgres
def test_ingest_remakes_a_cached_partition_the_retention_dropped(sessions: sessionmaker[Session]) -> None:
    ingestor = Ingestor()
    old = TODAY - 50 * DAY
    _store(sessions, _batch("gpu-a-01", [old + 60]), ingestor)
    with sessions.begin() as session:
        session.execute(delete(DirtyHour))
    with sessions.begin() as session:
        assert prune_samples(session, 35, datetime.now(UTC)).partitions == (partition_name(old),)
    assert _store(sessions, _batch("gpu-a-01", [old + 120]), ingestor) == 1
    assert _partitions(sessions.kw["bind"]) == {partition_name(old): 1}


def test_a_rolled_back_registration_is_not_remembered(sessions: sessionmaker[Session]) -> None:
    ingestor = Ingestor()
    with sessions() as session:
        ingestor.store(session, _batch("gpu-a-01", [TODAY + 60], gpus=2))
        session.rollback()
    assert _store(sessions, _batch("gpu-a-01", [TODAY + 120], gpus=2), ingestor) == 2
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Gpu)) == 2
    assert _samples(sessions) == 2


def test_a_batch_overlapping_stored_readings_adds_only_the_new_ones(sessions: sessionmaker[Session]) -> None:
    ingestor = Ingestor()
    assert _store(sessions, _batch("gpu-a-01", [TODAY + 10 * i for i in range(10)], gpus=2), ingestor) == 20
    assert _store(sessions, _batch("gpu-a-01", [TODAY + 10 * i for i in range(5, 15)], gpus=2), ingestor) == 20
    assert _samples(sessions) == 30
    with sessions() as session:
        values = session.scalars(select(GpuSample.utilization_ratio).distinct()).all()
    assert values == [0.5]


def _run_concurrently(workers: list[Callable[[], object]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(work: Callable[[], object]) -> None:
        try:
            work()
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(work,)) for work in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return errors


def test_concurrent_ingest_of_new_gpus_on_new_days(sessions: sessionmaker[Session]) -> None:
    """Eight nodes' first batches at once, each with new GPUs and readings on three days without partitions."""
    instants = [TODAY + 10 * DAY + offset for offset in (0, 600, DAY, DAY + 600, 2 * DAY)]

    def node(n: int) -> Callable[[], object]:
        return lambda: [_store(sessions, _batch(f"gpu-c-{n:02d}", instants, gpus=8), Ingestor()) for _ in range(2)]

    assert _run_concurrently([node(n) for n in range(8)]) == []
    assert _samples(sessions) == 8 * 8 * len(instants)


def test_retention_expires_per_job_utilization_with_the_samples(sessions: sessionmaker[Session]) -> None:
    from finops.db.models import GpuJobUtilization

    old, recent = TODAY - 40 * DAY, TODAY - DAY
    for day in (old, recent):
        batch = _batch("gpu-a-01", [day + 600]).model_dump()
        batch["job_utilization"] = [
            {"uuid": _uuid("gpu-a-01", 0), "ts": day + 600, "job_id": job, "utilization_ratio": 0.5}
            for job in ("501", "502")
        ]
        _store(sessions, IngestBatch.model_validate(batch))
    with sessions.begin() as session:
        session.execute(delete(DirtyHour))
    with sessions.begin() as session:
        pruned = prune_samples(session, 35, datetime.fromtimestamp(TODAY + 3600, UTC))
    assert pruned.job_utilization_rows == 2
    with sessions() as session:
        left = session.execute(select(GpuJobUtilization.ts, GpuJobUtilization.job_id).order_by("job_id")).all()
    assert [(to_epoch(ts), job) for ts, job in left] == [(recent + 600, "501"), (recent + 600, "502")]
    assert _samples(sessions) == 1


def test_retention_expires_the_nodes_hourly_rates_with_the_samples(sessions: sessionmaker[Session]) -> None:
    from finops.db.models import NodeIoHour

    cutoff = TODAY - 35 * DAY
    for instant in (cutoff - 3600, cutoff, TODAY - DAY):
        batch = _batch("gpu-a-01", [instant + 600]).model_dump()
        batch["node_io"] = [{"ts": instant + 600, "nfs_read_bytes_per_second": 1e8, "disk_read_bytes_per_second": 0}]
        _store(sessions, IngestBatch.model_validate(batch))
    with sessions.begin() as session:
        session.execute(delete(DirtyHour))
    with sessions.begin() as session:
        pruned = prune_samples(session, 35, datetime.fromtimestamp(TODAY + 3600, UTC))
    assert (to_epoch(pruned.before), pruned.node_io_rows) == (cutoff, 2), "the last hour before the cutoff: 2 kinds"
    with sessions() as session:
        left = session.execute(select(NodeIoHour.hour, NodeIoHour.kind).order_by(NodeIoHour.hour, "kind")).all()
    assert [(to_epoch(hour), kind) for hour, kind in left] == [
        (cutoff, "disk_read"), (cutoff, "nfs_read"), (TODAY - DAY, "disk_read"), (TODAY - DAY, "nfs_read")
    ]  # fmt: skip
    assert _samples(sessions) == 2
