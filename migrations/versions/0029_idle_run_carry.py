"""idle run carry: the idle runs a scheduled re-judging found in each read of the readings, carried to the next
re-judging of the same read (``idle_run_carry``), which then reads only the readings after them

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-30 00:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """The table, empty: the first scheduled re-judging reads its periods whole, as before."""
    op.create_table(
        "idle_run_carry",
        sa.Column("lo", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hi", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("lo", "hi", name=op.f("pk_idle_run_carry")),
    )


def downgrade() -> None:
    """Drop the table: re-judging reads its periods whole."""
    op.drop_table("idle_run_carry")
