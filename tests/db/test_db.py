"""Migrations: idempotent upgrade, the gate that refuses an un-migrated database, models matching migrations."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from finops.db.engine import NotMigratedError, current_revision, head_revision, make_engine, require_migrated, upgrade
from finops.db.models import Base
from finops.ingest.partitions import include_name


def test_upgrade_is_idempotent_and_gate_opens(database_url: str) -> None:
    engine = make_engine(database_url)
    with pytest.raises(NotMigratedError, match="gpu-finops db upgrade"):
        require_migrated(engine)
    upgrade(engine)
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    require_migrated(engine)
    engine.dispose()


def test_models_and_migrations_agree(engine) -> None:  # type: ignore[no-untyped-def]
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"include_name": include_name})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_commands_refuse_an_unmigrated_database(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {"FINOPS_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite'}", "PATH": ""}
    result = subprocess.run(
        [sys.executable, "-m", "finops.cli", "report", "--start", "2026-01-01", "--end", "2026-02-01"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "run `gpu-finops db upgrade`" in result.stderr


def test_collector_imports_nothing_of_the_service() -> None:
    code = (
        "import sys, collector.agent, collector.shipper, collector.exposition, collector.contract.wire, "
        "collector.sources.replay\n"
        "print(sorted(m for m in ('sqlalchemy', 'fastapi', 'streamlit') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_engine_schema_migration_keeps_data_both_ways(database_url: str) -> None:
    """0001 → 0002 turns account → team rows into account rules and gives budgets a project; back to 0001
    restores them."""
    from sqlalchemy import inspect, text

    from finops.db.engine import downgrade

    engine = make_engine(database_url)
    upgrade(engine, "0001")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO teams (id, name) VALUES (1, 'vision')"))
        connection.execute(text("INSERT INTO account_teams (account, team_id) VALUES ('cv-lab', 1)"))
        connection.execute(text("INSERT INTO budgets (team_id, month, amount, currency) VALUES (1, 0, 5, 'USD')"))
    upgrade(engine, "0002")
    with engine.begin() as connection:
        assert connection.execute(text("SELECT kind, key, value, team_id FROM team_rules")).all() == [
            ("account", "", "cv-lab", 1)
        ]
        assert connection.execute(text("SELECT team_id, month, project FROM budgets")).all() == [(1, 0, "")]
        assert inspect(connection).get_pk_constraint("budgets")["constrained_columns"] == [
            "team_id",
            "month",
            "project",
        ]
        connection.execute(
            text("INSERT INTO budgets (team_id, month, project, amount, currency) VALUES (1, 0, 'llm', 2, 'USD')")
        )
    downgrade(engine, "0001")
    with engine.begin() as connection:
        assert connection.execute(text("SELECT account, team_id FROM account_teams")).all() == [("cv-lab", 1)]
        assert connection.execute(text("SELECT team_id, month FROM budgets")).all() == [(1, 0)]
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_team_hours_migration_sums_the_existing_ledger(database_url: str) -> None:
    """Down to 0006 and up again, the migration's backfill of ledger_team_hours from the ledger gives the same
    rows the rollup kept (the scenario slice: held hours with samples, unallocated capacity)."""
    from datetime import timedelta

    from sqlalchemy import inspect, select

    from finops.db.engine import downgrade, session_factory
    from finops.db.ledger_tables import LedgerTeamHour
    from finops.ingest.readings import Ingestor
    from finops.jobs.slurm_import import import_sacct
    from finops.ledger.rollup import rollup
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.timeutil import to_epoch
    from tests.support import scenario

    engine = make_engine(database_url)
    upgrade(engine)
    sessions = session_factory(engine)
    t0 = scenario.start_hour()
    with sessions.begin() as session:
        Ingestor().store(session, scenario.batch(t0))
        import_sacct(session, scenario.sacct_lines(t0), source="scenario")
        rollup(session, Pricing(load_catalog(), PricingModel.ON_DEMAND), to_epoch(t0 + timedelta(hours=2)))
    columns = [c for c in LedgerTeamHour.__table__.columns]
    with sessions() as session:
        kept = session.execute(select(*columns).order_by(*columns[:2])).all()
    assert len(kept) >= 3
    downgrade(engine, "0006")
    with engine.connect() as connection:
        assert "ledger_team_hours" not in inspect(connection).get_table_names()
    upgrade(engine)
    with sessions() as session:
        assert session.execute(select(*columns).order_by(*columns[:2])).all() == kept
    engine.dispose()


def test_job_utilization_migration_up_down_and_up(database_url: str) -> None:
    """0008 makes gpu_job_utilization (primary key GPU, instant, job; index on the instant); downgrading below it
    drops the table, upgrading again makes it anew."""
    from alembic.script import ScriptDirectory
    from sqlalchemy import inspect, text

    from finops.db.engine import downgrade, migrations_dir

    below = ScriptDirectory(str(migrations_dir())).get_revision("0008").down_revision
    assert isinstance(below, str)
    engine = make_engine(database_url)
    upgrade(engine)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO nodes (hostname) VALUES ('gpu-a-01')"))
        connection.execute(
            text("INSERT INTO gpus (uuid, node_id, gpu_index, model, in_service_from) "
                 "SELECT 'GPU-1', id, 0, 'NVIDIA H100 80GB HBM3', 0 FROM nodes")
        )  # fmt: skip
        connection.execute(
            text("INSERT INTO gpu_job_utilization (gpu_id, ts, job_id, utilization_ratio) "
                 "SELECT id, 1772445600, :job, 0.5 FROM gpus"),
            {"job": "ns/" + "p" * 313},  # a namespace/pod id of the longest length, 317
        )  # fmt: skip
        table = inspect(connection)
        assert table.get_pk_constraint("gpu_job_utilization")["constrained_columns"] == ["gpu_id", "ts", "job_id"]
        assert [i["column_names"] for i in table.get_indexes("gpu_job_utilization")] == [["ts"]]
    downgrade(engine, below)
    with engine.connect() as connection:
        assert "gpu_job_utilization" not in inspect(connection).get_table_names()
    upgrade(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM gpu_job_utilization")).scalar_one() == 0
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_ledger_foreign_key_migration_down_and_up(database_url: str) -> None:
    """0010 leaves the ledger only its foreign key to jobs; downgrading below it restores those to gpus and teams,
    keeping the rows; upgrading again drops them."""
    from sqlalchemy import inspect, text

    from finops.db.engine import downgrade

    def shape() -> tuple[list[str], int]:
        with engine.connect() as connection:
            referred = sorted(fk["referred_table"] for fk in inspect(connection).get_foreign_keys("ledger"))
            return referred, connection.execute(text("SELECT count(*) FROM ledger")).scalar_one()

    engine = make_engine(database_url)
    upgrade(engine)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO nodes (hostname) VALUES ('gpu-a-01')"))
        connection.execute(text("INSERT INTO teams (name) VALUES ('alpha')"))
        connection.execute(
            text("INSERT INTO gpus (uuid, node_id, gpu_index, model, in_service_from) "
                 "SELECT 'GPU-1', id, 0, 'NVIDIA H100 80GB HBM3', 0 FROM nodes")
        )  # fmt: skip
        connection.execute(
            text("INSERT INTO ledger (hour, gpu_id, team_id, seconds, used_gpu_seconds, sample_count, energy_joules, "
                 "allocated_cost, used_cost, idle_cost, energy_cost, currency) "
                 "SELECT 1772445600, gpus.id, teams.id, 3600, 0, 0, 0, 2, 0, 0, 0, 'USD' FROM gpus, teams")
        )  # fmt: skip
    assert shape() == (["jobs"], 1)
    downgrade(engine, "0009")
    assert shape() == (["gpus", "jobs", "teams"], 1)
    upgrade(engine)
    assert shape() == (["jobs"], 1)
    engine.dispose()


def test_unpriced_ledger_migration_down_and_up(database_url: str) -> None:
    """0012 lets the ledger's allocated, used and idle cost be NULL (unpriced GPU-hours) and gives the team-hours
    their unpriced seconds; downgrading below it drops the unpriced rows and marks their hours dirty (the older
    rollup's way of waiting for a price), keeping the priced rows; upgrading again allows NULL again."""
    from sqlalchemy import inspect, text
    from sqlalchemy.exc import IntegrityError

    from finops.db.engine import downgrade

    insert = text(
        "INSERT INTO ledger (hour, gpu_id, team_id, seconds, used_gpu_seconds, sample_count, energy_joules, "
        "allocated_cost, used_cost, idle_cost, energy_cost, currency) "
        "SELECT :hour, gpus.id, teams.id, 3600, 0, 0, 0, :cost, :cost, :cost, 0, 'USD' FROM gpus, teams"
    )
    engine = make_engine(database_url)
    upgrade(engine)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO nodes (hostname) VALUES ('gpu-a-01')"))
        connection.execute(text("INSERT INTO teams (name) VALUES ('alpha')"))
        connection.execute(
            text("INSERT INTO gpus (uuid, node_id, gpu_index, model, in_service_from) "
                 "SELECT 'GPU-1', id, 0, 'ACME Z9 64GB', 0 FROM nodes")
        )  # fmt: skip
        connection.execute(insert, {"hour": 1772445600, "cost": 2})
        connection.execute(insert, {"hour": 1772449200, "cost": None})
        assert "ix_ledger_unpriced" in {i["name"] for i in inspect(connection).get_indexes("ledger")}
        assert "unpriced_gpu_seconds" in {c["name"] for c in inspect(connection).get_columns("ledger_team_hours")}
    downgrade(engine, "0011")
    with engine.begin() as connection:
        assert connection.execute(text("SELECT hour FROM ledger")).scalars().all() == [1772445600]
        assert connection.execute(text("SELECT hour FROM ledger_dirty_hours")).scalars().all() == [1772449200]
        assert "unpriced_gpu_seconds" not in {c["name"] for c in inspect(connection).get_columns("ledger_team_hours")}
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(insert, {"hour": 1772449200, "cost": None})
    upgrade(engine)
    with engine.begin() as connection:
        connection.execute(insert, {"hour": 1772449200, "cost": None})
        assert connection.execute(text("SELECT count(*) FROM ledger WHERE allocated_cost IS NULL")).scalar_one() == 1
    assert current_revision(engine) == head_revision()
    engine.dispose()
