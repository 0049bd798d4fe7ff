"""tsdb_gpu_metering: per-GPU segments of an hour metered by PromQL from a Prometheus-compatible TSDB, read by the
ledger rollup instead of raw readings

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 05:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table, empty: the database mode (the default) never writes it."""
    op.create_table(
        "tsdb_gpu_metering",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("stop", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("utilization_sum", sa.Float(), nullable=False),
        sa.Column("energy_joules", sa.Float(), nullable=False),
        sa.Column("memory_max_bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_tsdb_gpu_metering_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("gpu_id", "start", name=op.f("pk_tsdb_gpu_metering")),
    )


def downgrade() -> None:
    """Drop the table (its rows can be metered again from the TSDB)."""
    op.drop_table("tsdb_gpu_metering")
