"""unpriced GPU-hours stay in the ledger: its allocated, used and idle cost may be NULL (no price for the GPU's
model), ledger_team_hours counts their seconds, and a partial index finds them

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

MONEY = sa.Numeric(precision=20, scale=6).with_variant(sa.BigInteger(), "sqlite")
NULLABLE_MONEY = ("allocated_cost", "used_cost", "idle_cost")
UNPRICED = sa.text("allocated_cost IS NULL")


def upgrade() -> None:
    """Let the ledger's allocated, used and idle cost be NULL, index the unpriced rows by hour, and give
    ledger_team_hours ``unpriced_gpu_seconds`` (0 for the existing rows: before this, unpriced GPU-hours were left
    out of the ledger, and the hours they were missing from are still marked dirty, so the next rollup adds them)."""
    with op.batch_alter_table("ledger") as batch:
        for name in NULLABLE_MONEY:
            batch.alter_column(name, existing_type=MONEY, nullable=True)
    op.create_index("ix_ledger_unpriced", "ledger", ["hour"], postgresql_where=UNPRICED, sqlite_where=UNPRICED)
    op.add_column(
        "ledger_team_hours", sa.Column("unpriced_gpu_seconds", sa.BigInteger(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    """Drop the unpriced rows (the older schema cannot hold them) and mark their hours dirty, as the older rollup
    left hours missing a price; their team-hours are rewritten by that rebuild. Then restore NOT NULL."""
    op.execute(
        "INSERT INTO ledger_dirty_hours (hour) SELECT DISTINCT hour FROM ledger WHERE allocated_cost IS NULL "
        "AND hour NOT IN (SELECT hour FROM ledger_dirty_hours)"
    )
    op.execute("DELETE FROM ledger WHERE allocated_cost IS NULL")
    with op.batch_alter_table("ledger_team_hours") as batch:
        batch.drop_column("unpriced_gpu_seconds")
    op.drop_index("ix_ledger_unpriced", table_name="ledger")
    with op.batch_alter_table("ledger") as batch:
        for name in NULLABLE_MONEY:
            batch.alter_column(name, existing_type=MONEY, nullable=False)
