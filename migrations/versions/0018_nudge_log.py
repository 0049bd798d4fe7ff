"""nudge_log: when each user was last sent each kind of nudge, so that a user gets at most one message per kind every
FINOPS_NUDGE_REPEAT_DAYS (docs/nudges.md)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table, empty: every user may be told once."""
    op.create_table(
        "nudge_log",
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("sent_at", sa.BigInteger(), nullable=False),
        sa.Column("jobs", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("user", "kind", name=op.f("pk_nudge_log")),
    )


def downgrade() -> None:
    """Drop the table (users may then be told again at once)."""
    op.drop_table("nudge_log")
