"""Shared test fixtures: the real-data folder and the databases every database test runs on."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The real third-party data folder: ``FINOPS_SHARED_DATA`` or ``../shared/data`` beside the clone."""
    configured = Path(os.environ.get("FINOPS_SHARED_DATA", "../shared/data"))
    return configured if configured.is_absolute() else (REPO_ROOT / configured).resolve()


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


def debian_binary(name: str) -> Path:
    """Path of a program from a Debian package that ``.ci/run`` installs; skips without it, fails under CI=true."""
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (Debian package installed by .ci/run)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return Path(found)
