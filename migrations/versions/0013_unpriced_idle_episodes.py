"""idle episodes on a GPU whose model has no price keep their cost NULL (unpriced), not 0

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

MONEY = sa.Numeric(precision=20, scale=6).with_variant(sa.BigInteger(), "sqlite")


def upgrade() -> None:
    """Let an idle episode's cost be NULL. Episodes stored before this on unpriced GPUs keep their 0 until the
    rollup re-judges their hours (a catalog import that prices the model marks them)."""
    with op.batch_alter_table("idle_episodes") as batch:
        batch.alter_column("cost", existing_type=MONEY, nullable=True)


def downgrade() -> None:
    """The older schema cannot hold an unknown cost: unpriced episodes get 0 again (what the older code stored),
    then NOT NULL is restored."""
    op.execute("UPDATE idle_episodes SET cost = 0 WHERE cost IS NULL")
    with op.batch_alter_table("idle_episodes") as batch:
        batch.alter_column("cost", existing_type=MONEY, nullable=False)
