"""hardware activity: the profiling fields of a reading (SM, occupancy, tensor, DRAM, FP64/FP32/FP16 pipes, graphics
engine), their means per ledger row with the seconds they cover and the SM-active cost, their sums per team-hour,
and their sums and counts per TSDB-metered segment

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 15:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

MONEY = sa.Numeric(precision=20, scale=6).with_variant(sa.BigInteger(), "sqlite")
ACTIVITIES = (
    "sm_active", "sm_occupancy", "tensor_active", "dram_active", "fp64_active", "fp32_active", "fp16_active",
    "graphics_engine_active",
)  # fmt: skip
TEAM_ACTIVITIES = ("sm_active", "tensor_active", "dram_active")


def _counter(name: str) -> sa.Column[int]:
    return sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")


def upgrade() -> None:
    """Add the activity columns, NULL (unmeasured) or 0 (no seconds measured) for the rows stored so far: readings
    stored before this carried no activity, so the ledger built from them has none either."""
    with op.batch_alter_table("gpu_samples") as batch:
        for name in ACTIVITIES:
            batch.add_column(sa.Column(f"{name}_ratio", sa.Float(), nullable=True))
    op.create_table(
        "profiled_hours",
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", name=op.f("pk_profiled_hours")),
    )
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("profiled_seconds", sa.Integer(), nullable=False, server_default="0"))
        for name in ACTIVITIES:
            batch.add_column(sa.Column(f"{name}_ratio", sa.Float(), nullable=True))
        batch.add_column(sa.Column("sm_active_cost", MONEY, nullable=True))
    with op.batch_alter_table("ledger_team_hours") as batch:
        batch.add_column(_counter("profiled_gpu_seconds"))
        for name in TEAM_ACTIVITIES:
            batch.add_column(sa.Column(f"{name}_gpu_seconds", sa.Float(), nullable=True))
            batch.add_column(_counter(f"{name}_measured_gpu_seconds"))
        batch.add_column(sa.Column("sm_active_cost", MONEY, nullable=True))
    with op.batch_alter_table("tsdb_gpu_metering") as batch:
        batch.add_column(sa.Column("readings", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("profiled", sa.Integer(), nullable=False, server_default="0"))
        for name in ACTIVITIES:
            batch.add_column(sa.Column(f"{name}_sum", sa.Float(), nullable=False, server_default="0"))
            batch.add_column(sa.Column(f"{name}_n", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    """Drop the activity columns (the readings' activity is lost; the ledger's costs are unchanged)."""
    with op.batch_alter_table("tsdb_gpu_metering") as batch:
        for name in reversed(ACTIVITIES):
            batch.drop_column(f"{name}_n")
            batch.drop_column(f"{name}_sum")
        batch.drop_column("profiled")
        batch.drop_column("readings")
    with op.batch_alter_table("ledger_team_hours") as batch:
        batch.drop_column("sm_active_cost")
        for name in reversed(TEAM_ACTIVITIES):
            batch.drop_column(f"{name}_measured_gpu_seconds")
            batch.drop_column(f"{name}_gpu_seconds")
        batch.drop_column("profiled_gpu_seconds")
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("sm_active_cost")
        for name in reversed(ACTIVITIES):
            batch.drop_column(f"{name}_ratio")
        batch.drop_column("profiled_seconds")
    op.drop_table("profiled_hours")
    with op.batch_alter_table("gpu_samples") as batch:
        for name in reversed(ACTIVITIES):
            batch.drop_column(f"{name}_ratio")
