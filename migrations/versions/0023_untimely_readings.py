"""untimely_readings: readings ingest refused for their time, per node and reason (a node's clock off), for the data
quality page

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-12 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table, empty: no refusal was counted before."""
    op.create_table(
        "untimely_readings",
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("readings", sa.BigInteger(), nullable=False),
        sa.Column("first_at", sa.BigInteger(), nullable=False),
        sa.Column("last_at", sa.BigInteger(), nullable=False),
        sa.Column("last_error", sa.String(length=512), nullable=False),
        sa.PrimaryKeyConstraint("node", "reason", name=op.f("pk_untimely_readings")),
    )


def downgrade() -> None:
    """Drop the table (the counts are lost)."""
    op.drop_table("untimely_readings")
