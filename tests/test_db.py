"""Migrations: idempotent upgrade, the gate that refuses an un-migrated database, models matching migrations."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from finops.db import NotMigratedError, current_revision, head_revision, make_engine, require_migrated, upgrade
from finops.models import Base


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
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
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
        "import sys, collector.agent, collector.shipper, collector.exposition, collector.wire, "
        "collector.sources.replay\n"
        "print(sorted(m for m in ('sqlalchemy', 'fastapi', 'streamlit') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
