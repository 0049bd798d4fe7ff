"""partition gpu_samples by day on PostgreSQL

``gpu_samples`` becomes ``PARTITION BY RANGE (ts)`` with one partition per UTC day, ``gpu_samples_pYYYYMMDD``
holding ts in [that midnight, the next midnight) (epoch seconds); existing rows move into the partitions of
their days. Primary key (gpu_id, ts) and the foreign key to ``gpus`` stay, with their names; each partition
carries them. Later partitions are made by ingest and the daily maintenance job (``finops.ingest.partitions``).
SQLite keeps one plain table: this migration does nothing there.

Downgrade puts every row back into one plain table.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 07:10:00.000000
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

DAY = 86_400
PLAIN = "gpu_samples_plain"


def _columns() -> list[sa.Column[object]]:
    return [
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("utilization_ratio", sa.Float(), nullable=True),
        sa.Column("memory_utilization_ratio", sa.Float(), nullable=True),
        sa.Column("memory_used_bytes", sa.BigInteger(), nullable=True),
        sa.Column("power_watts", sa.Float(), nullable=True),
        sa.Column("energy_joules", sa.Float(), nullable=True),
        sa.Column("temperature_celsius", sa.Float(), nullable=True),
        sa.Column("sm_clock_hertz", sa.Float(), nullable=True),
        sa.Column("clocks_event_reasons", sa.BigInteger(), nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
    ]


_COLUMN_NAMES = ", ".join(column.name for column in _columns())


def _partition(day: int) -> str:
    return datetime.fromtimestamp(day, UTC).strftime("gpu_samples_p%Y%m%d")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.rename_table("gpu_samples", PLAIN)
    op.execute(f"ALTER TABLE {PLAIN} RENAME CONSTRAINT pk_gpu_samples TO pk_{PLAIN}")
    op.execute(f"ALTER TABLE {PLAIN} RENAME CONSTRAINT fk_gpu_samples_gpu_id_gpus TO fk_{PLAIN}_gpu_id_gpus")
    op.create_table(
        "gpu_samples",
        *_columns(),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_samples_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("gpu_id", "ts", name=op.f("pk_gpu_samples")),
        postgresql_partition_by="RANGE (ts)",
    )
    days = bind.execute(sa.text(f"SELECT DISTINCT ts - ((ts % {DAY}) + {DAY}) % {DAY} FROM {PLAIN}")).scalars()  # noqa: S608
    for day in sorted(days):
        bounds = f"FOR VALUES FROM ({day}) TO ({day + DAY})"
        op.execute(f'CREATE TABLE "{_partition(day)}" PARTITION OF gpu_samples {bounds}')
    op.execute(f"INSERT INTO gpu_samples ({_COLUMN_NAMES}) SELECT {_COLUMN_NAMES} FROM {PLAIN}")  # noqa: S608
    op.drop_table(PLAIN)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.create_table(
        PLAIN,
        *_columns(),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=f"fk_{PLAIN}_gpu_id_gpus"),
        sa.PrimaryKeyConstraint("gpu_id", "ts", name=f"pk_{PLAIN}"),
    )
    op.execute(f"INSERT INTO {PLAIN} ({_COLUMN_NAMES}) SELECT {_COLUMN_NAMES} FROM gpu_samples")  # noqa: S608
    op.drop_table("gpu_samples")  # and its partitions with it
    op.rename_table(PLAIN, "gpu_samples")
    op.execute(f"ALTER TABLE gpu_samples RENAME CONSTRAINT pk_{PLAIN} TO pk_gpu_samples")
    op.execute(f"ALTER TABLE gpu_samples RENAME CONSTRAINT fk_{PLAIN}_gpu_id_gpus TO fk_gpu_samples_gpu_id_gpus")
