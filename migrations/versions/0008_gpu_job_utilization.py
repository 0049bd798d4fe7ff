"""gpu_job_utilization: per-job SM utilisation of GPUs shared by several jobs at once

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 11:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JOB_ID_MAX_LENGTH = 317  # collector.contract.wire.JOB_ID_MAX_LENGTH when this migration was written


def upgrade() -> None:
    """Create the table (empty: collectors send per-job utilisation from now on)."""
    op.create_table(
        "gpu_job_utilization",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.String(length=JOB_ID_MAX_LENGTH), nullable=False),
        sa.Column("utilization_ratio", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_job_utilization_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("gpu_id", "ts", "job_id", name=op.f("pk_gpu_job_utilization")),
    )
    op.create_index(op.f("ix_gpu_job_utilization_ts"), "gpu_job_utilization", ["ts"])


def downgrade() -> None:
    op.drop_index(op.f("ix_gpu_job_utilization_ts"), table_name="gpu_job_utilization")
    op.drop_table("gpu_job_utilization")
