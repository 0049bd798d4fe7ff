"""gpu_hour_metering, metering_cursors, metered_holdings and reading_arrivals: the ledger's metering kept between
rollups, so that each reading is metered once

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29 08:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

_ACTIVITIES = (
    "sm_active", "sm_occupancy", "tensor_active", "dram_active", "fp64_active", "fp32_active", "fp16_active",
    "graphics_engine_active",
)  # fmt: skip


def upgrade() -> None:
    """Create the tables, empty: the next rollup meters every hour it rebuilds from its readings, as before, and
    keeps what it summed."""
    op.create_table(
        "gpu_hour_metering",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("allocation_id", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("utilization_units", sa.BigInteger(), nullable=False),
        sa.Column("energy_units", sa.BigInteger(), nullable=False),
        sa.Column("readings", sa.Integer(), nullable=False),
        sa.Column("profiled", sa.Integer(), nullable=False),
        *(
            column
            for activity in _ACTIVITIES
            for column in (
                sa.Column(f"{activity}_units", sa.BigInteger(), nullable=False),
                sa.Column(f"{activity}_n", sa.Integer(), nullable=False),
            )
        ),
        sa.PrimaryKeyConstraint("hour", "gpu_id", "allocation_id", name=op.f("pk_gpu_hour_metering")),
    )
    op.create_table(
        "metering_cursors",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("through", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("gpu_id", name=op.f("pk_metering_cursors")),
    )
    op.create_table(
        "metered_holdings",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("allocation_id", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("stop", sa.BigInteger(), nullable=False),
        sa.Column("shared", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "gpu_id", "allocation_id", name=op.f("pk_metered_holdings")),
    )
    op.create_table(
        "reading_arrivals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("earliest", sa.Text(), nullable=False),
        sa.Column("xact", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reading_arrivals")),
    )


def downgrade() -> None:
    """Drop the tables: rollups meter whole hours again."""
    for table in ("reading_arrivals", "metered_holdings", "metering_cursors", "gpu_hour_metering"):
        op.drop_table(table)
