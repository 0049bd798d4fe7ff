"""Alembic environment: runs migrations on the engine passed in by :func:`finops.db.upgrade`."""

from __future__ import annotations

from alembic import context

from finops.models import Base
from finops.partitions import include_name

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
