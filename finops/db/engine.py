"""Engine, sessions and the Alembic migration gate.

Every command except ``gpu-finops db upgrade`` calls :func:`require_migrated` first and refuses to run on
a database that is not at the newest migration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

import finops
from finops.errors import FinopsError


class NotMigratedError(FinopsError, RuntimeError):
    """The database is not at the newest migration; the message says what to run."""


def migrations_dir() -> Path:
    """The Alembic script directory: ``migrations/`` in a source tree, ``finops/migrations`` in a wheel."""
    package_dir = Path(finops.__file__).resolve().parent
    for candidate in (package_dir / "migrations", package_dir.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(f"no Alembic migrations beside {package_dir}")


def make_engine(url: str) -> Engine:
    """An engine for ``url``. SQLite gets WAL, foreign keys on and its parent directory created."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine`` that keep loaded objects usable after commit."""
    return sessionmaker(engine, expire_on_commit=False)


def _alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["connection"] = None
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision``; running it again does nothing."""
    command.upgrade(_alembic_config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Revert migrations down to ``revision`` (``base`` empties the schema)."""
    command.downgrade(_alembic_config(engine), revision)


def head_revision(directory: Path | None = None) -> str:
    """The newest migration's revision id, of this code's :func:`migrations_dir` or of the Alembic script
    ``directory`` given (another checkout's ``migrations/``). Raises FileNotFoundError when it has none."""
    head = ScriptDirectory(str(directory or migrations_dir())).get_current_head()
    if head is None:
        raise FileNotFoundError(f"no migrations found in {directory or migrations_dir()}")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; None for an empty database."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def require_migrated(engine: Engine) -> None:
    """Raise :class:`NotMigratedError` unless the database is at the newest migration."""
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise NotMigratedError(
            f"database {engine.url.render_as_string(hide_password=True)} is at migration {current or 'none'}, "
            f"the code needs {head}: run `gpu-finops db upgrade`"
        )
