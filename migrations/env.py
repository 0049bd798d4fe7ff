"""Alembic environment: runs migrations on the engine passed in by :func:`finops.db.engine.upgrade`."""

from __future__ import annotations

from alembic import context

import alerts.models  # noqa: F401  (its tables belong to the same metadata)
from finops.db.models import Base
from finops.ingest.partitions import include_name

config = context.config
engine = config.attributes["engine"]

with engine.begin() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        include_name=include_name,  # the day partitions of gpu_samples are made at run time, not by migrations
    )
    with context.begin_transaction():
        context.run_migrations()
