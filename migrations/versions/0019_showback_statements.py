"""showback_statements: the monthly showback statements queued, one per team and month, so that a statement is
queued once however often the monthly job runs (``gpu-finops showback``)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 08:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table, empty: the first monthly run after the upgrade queues the previous month's statements."""
    op.create_table(
        "showback_statements",
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("month", sa.BigInteger(), nullable=False),
        sa.Column("queued_at", sa.BigInteger(), nullable=False),
        sa.Column("route", sa.String(length=128), nullable=False),
        sa.Column("deliveries", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_showback_statements_team_id_teams")),
        sa.PrimaryKeyConstraint("team_id", "month", name=op.f("pk_showback_statements")),
    )


def downgrade() -> None:
    """Drop the table: which months' statements were queued is forgotten (a later run queues them again)."""
    op.drop_table("showback_statements")
