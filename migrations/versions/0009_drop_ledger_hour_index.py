"""drop ix_ledger_hour: ix_ledger_hour_team (hour, team_id) serves every query by hour, one index less to write

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 12:30:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Drop the single-column index on ledger.hour; range scans and max(hour) use ix_ledger_hour_team."""
    op.drop_index("ix_ledger_hour", table_name="ledger")


def downgrade() -> None:
    """Create it again."""
    op.create_index("ix_ledger_hour", "ledger", ["hour"], unique=False)
