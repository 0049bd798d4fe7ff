"""Shared test fixtures: the real-data folder, the databases every database test runs on, and the ledger on the
hand-computed slice (``loaded``)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.environment import shared_data_dir

# sacct is on the PATH of the machines the tests run on (the live Slurm tests need it), which schedules the sacct
# import of every `serve` and `scheduler` the tests start; they import no Slurm jobs unless a test says so.
os.environ.setdefault("FINOPS_SACCT_SCHEDULE_SECONDS", "0")


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


POSTGRES_SERVER_URL = os.environ.get("FINOPS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
"""Where the run's own PostgreSQL database is created: a URL of any database on the server, used only to create and
drop ``finops_test_<pid>_<random>``; tests never write to it."""


def _unavailable(message: str) -> None:
    """Skip, or fail under ``CI=true``, because PostgreSQL cannot be used."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_run_url() -> Iterator[str]:
    """The URL of a PostgreSQL database of this test run's own, created on first use and dropped when the run ends,
    so two runs on one machine never touch each other's data. Skips (fails under ``CI=true``) when the server at
    ``FINOPS_TEST_POSTGRES_URL`` cannot be reached or refuses ``CREATE DATABASE``."""
    from sqlalchemy import create_engine, make_url, text

    server = make_url(POSTGRES_SERVER_URL)
    name = f"finops_test_{os.getpid()}_{secrets.token_hex(4)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # any connection failure means "no PostgreSQL here"
        admin.dispose()
        _unavailable(f"PostgreSQL at {POSTGRES_SERVER_URL} is unavailable: {exc.__class__.__name__}: {exc}")
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def reset_postgres(url: str) -> None:
    """Empty the PostgreSQL database at ``url`` (its ``public`` schema dropped and made again)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database URL, once on an SQLite file and once on this run's own PostgreSQL database (skipped if
    PostgreSQL is down, a failure under ``CI=true``)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'finops.sqlite'}"
    url: str = request.getfixturevalue("postgres_run_url")
    reset_postgres(url)
    return url


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
        map_account(session, "acct-a", "alpha", actor="system:test")
        Ingestor().store(session, batch)
        result = import_sacct(session, scenario.sacct_lines(t0), source="scenario")
        assert (result.jobs, result.errors) == (2, [])
        rollup(session, pricing, to_epoch(t0 + timedelta(hours=2)))
    return sessions, t0, rate, pricing
