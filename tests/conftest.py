"""Shared test fixtures: the real-data folder, the databases every database test runs on, and the ledger on the
hand-computed slice (``loaded``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.environment import shared_data_dir


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ``../shared/data``; skips the test when it is absent, fails under ``CI=true``."""
    path = shared_data_dir()
    if not (path / "INDEX.md").is_file():
        message = f"real data folder {path} is missing (set FINOPS_SHARED_DATA to its location)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


POSTGRES_URL = os.environ.get("FINOPS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _reset_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database URL, once on an SQLite file and once on PostgreSQL (skipped if PostgreSQL is down,
    a failure under ``CI=true``)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'finops.sqlite'}"
    try:
        _reset_postgres(POSTGRES_URL)
    except Exception as exc:  # any connection failure means "no PostgreSQL here"
        message = f"PostgreSQL at {POSTGRES_URL} is unavailable: {exc.__class__.__name__}: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return POSTGRES_URL


@pytest.fixture
def engine(database_url: str):  # type: ignore[no-untyped-def]
    """A migrated engine on each backend."""
    from finops.db.engine import make_engine, upgrade

    created = make_engine(database_url)
    upgrade(created)
    yield created
    created.dispose()


@pytest.fixture
def sessions(engine):  # type: ignore[no-untyped-def]
    """A session factory on the migrated database."""
    from finops.db.engine import session_factory

    return session_factory(engine)


@pytest.fixture
def loaded(sessions):  # type: ignore[no-untyped-def]
    """The slice ingested, its jobs imported, the ledger built; yields (sessions, T, rate, pricing)."""
    from datetime import timedelta

    from finops.ingest.readings import Ingestor
    from finops.jobs.slurm_import import import_sacct
    from finops.jobs.teams import map_account
    from finops.ledger.rollup import rollup
    from finops.pricing.catalog import Pricing, PricingModel, load_catalog
    from finops.timeutil import to_epoch
    from tests.support import scenario

    t0 = scenario.start_hour()
    pricing = Pricing(load_catalog(), PricingModel.ON_DEMAND)
    rate = pricing.catalog.rate(scenario.MODEL, PricingModel.ON_DEMAND, t0)
    batch = scenario.batch(t0)
    with sessions.begin() as session:
        map_account(session, "acct-a", "alpha")
        Ingestor().store(session, batch)
        result = import_sacct(session, scenario.sacct_lines(t0), source="scenario")
        assert (result.jobs, result.errors) == (2, [])
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    return sessions, t0, rate, pricing
