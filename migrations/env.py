"""Alembic environment: runs migrations on the engine passed in by :func:`finops.db.engine.upgrade`."""

from __future__ import annotations

from alembic import context

import alerts.models  # noqa: F401  (its tables belong to the same metadata)
import finops.db.ledger_tables  # noqa: F401  (its tables belong to the same metadata)
from finops.db.models import Base
from finops.ingest.partitions import include_name

config = context.config
engine = config.attributes["engine"]

with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # Batch migrations rebuild a SQLite table (copy, drop, rename). With foreign keys on, dropping a parent table
        # (jobs) would fire its children's ON DELETE actions: allocations deleted, the ledger's jobs set NULL. The
        # pragma takes effect only outside a transaction: set before it begins, put back after it commits
        # (Alembic documentation, "Batch migrations for SQLite": foreign key constraints).
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()
    try:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=sqlite,
            include_name=include_name,  # the day partitions of gpu_samples are made at run time, not by migrations
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
    finally:
        if sqlite:
            connection.rollback()
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()
