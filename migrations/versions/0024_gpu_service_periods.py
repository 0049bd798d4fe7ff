"""gpu_service (the node inventory's service periods of GPUs) and nodes.cluster, state, state_reason, state_since

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-01 10:00:00.000000
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

HOUR = 3600


def upgrade() -> None:
    """Add the table and the columns (no node has an inventory state yet, no GPU a period). A GPU that only job
    imports know (no UUID) is from now on in service only while jobs held it, not from its first job on: the ledger
    hours from the earliest such GPU's first job to now are marked dirty, so that the next rollup rebuilds them
    (their unallocated capacity goes). The next ``gpu-finops nodes import`` puts the inventory's GPUs in service."""
    op.create_table(
        "gpu_service",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("end", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_service_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_service")),
    )
    op.create_index("ix_gpu_service_gpu_start", "gpu_service", ["gpu_id", "start"])
    op.add_column("nodes", sa.Column("cluster", sa.String(length=128), nullable=True))
    op.add_column("nodes", sa.Column("state", sa.String(length=128), nullable=True))
    op.add_column("nodes", sa.Column("state_reason", sa.String(length=255), nullable=True))
    op.add_column("nodes", sa.Column("state_since", sa.BigInteger(), nullable=True))
    bind = op.get_bind()
    first = bind.scalar(sa.text("SELECT MIN(in_service_from) FROM gpus WHERE uuid IS NULL"))
    if first is None:
        return
    now = int(time.time())
    marked = set(bind.scalars(sa.text("SELECT hour FROM ledger_dirty_hours WHERE hour >= :h"), {"h": first}))
    hours = [{"hour": h} for h in range(first - first % HOUR, now, HOUR) if h not in marked]
    if hours:
        bind.execute(sa.text("INSERT INTO ledger_dirty_hours (hour) VALUES (:hour)"), hours)


def downgrade() -> None:
    """Drop the table and the columns (GPUs known only from jobs are in service from their first job on again; the
    ledger keeps what the last rollup built until hours are rebuilt)."""
    op.drop_column("nodes", "state_since")
    op.drop_column("nodes", "state_reason")
    op.drop_column("nodes", "state")
    op.drop_column("nodes", "cluster")
    op.drop_index("ix_gpu_service_gpu_start", table_name="gpu_service")
    op.drop_table("gpu_service")
