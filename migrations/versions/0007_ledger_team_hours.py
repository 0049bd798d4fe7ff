"""ledger_team_hours: the ledger summed per hour and team, for reports and budgets by team

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 11:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

MONEY = sa.Numeric(precision=20, scale=6).with_variant(sa.BigInteger(), "sqlite")

BACKFILL = """
INSERT INTO ledger_team_hours (hour, team_id, seconds, used_gpu_seconds, metered_gpu_seconds, unmetered_gpu_seconds,
                               energy_joules, allocated_cost, used_cost, idle_cost, energy_cost, currency)
SELECT hour, team_id, SUM(seconds), SUM(used_gpu_seconds),
       SUM(CASE WHEN job_pk IS NOT NULL AND sample_count > 0 THEN seconds ELSE 0 END),
       SUM(CASE WHEN job_pk IS NOT NULL AND sample_count = 0 THEN seconds ELSE 0 END),
       SUM(energy_joules), SUM(allocated_cost), SUM(used_cost), SUM(idle_cost), SUM(energy_cost), MIN(currency)
FROM ledger
GROUP BY hour, team_id
"""


def upgrade() -> None:
    """Create the table and fill it from the ledger as it stands."""
    op.create_table(
        "ledger_team_hours",
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.BigInteger(), nullable=False),
        sa.Column("used_gpu_seconds", sa.Float(), nullable=False),
        sa.Column("metered_gpu_seconds", sa.BigInteger(), nullable=False),
        sa.Column("unmetered_gpu_seconds", sa.BigInteger(), nullable=False),
        sa.Column("energy_joules", sa.Float(), nullable=False),
        sa.Column("allocated_cost", MONEY, nullable=False),
        sa.Column("used_cost", MONEY, nullable=False),
        sa.Column("idle_cost", MONEY, nullable=False),
        sa.Column("energy_cost", MONEY, nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_ledger_team_hours_team_id_teams")),
        sa.PrimaryKeyConstraint("hour", "team_id", name=op.f("pk_ledger_team_hours")),
    )
    op.execute(BACKFILL)


def downgrade() -> None:
    """Drop the table (the ledger keeps every figure it held)."""
    op.drop_table("ledger_team_hours")
