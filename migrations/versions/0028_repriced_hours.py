"""repriced hours: the ledger hours a price change alone marked dirty (``ledger_repriced_hours``), whose stored idle
episodes the next rollup re-prices instead of judging them again; any other mark of an hour removes it (a trigger on
``ledger_dirty_hours``)

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

_PG_FUNCTION = """
CREATE FUNCTION ledger_dirty_hours_unreprice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM ledger_repriced_hours WHERE hour = NEW.hour;
    RETURN NEW;
END
$$
"""
_PG_TRIGGER = """
CREATE TRIGGER ledger_dirty_hours_unreprice BEFORE INSERT ON ledger_dirty_hours
FOR EACH ROW EXECUTE FUNCTION ledger_dirty_hours_unreprice()
"""
_SQLITE_TRIGGER = """
CREATE TRIGGER ledger_dirty_hours_unreprice BEFORE INSERT ON ledger_dirty_hours
BEGIN
    DELETE FROM ledger_repriced_hours WHERE hour = NEW.hour;
END
"""


def upgrade() -> None:
    """The table, and the trigger: every row proposed to ``ledger_dirty_hours`` (also one that is already there, which
    ``ON CONFLICT DO NOTHING`` then leaves: a BEFORE trigger fires first on both databases) takes its hour out of
    ``ledger_repriced_hours``, so that a mark of new readings or jobs is never lost behind a price mark."""
    op.create_table(
        "ledger_repriced_hours",
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", name=op.f("pk_ledger_repriced_hours")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        op.execute(_SQLITE_TRIGGER)


def downgrade() -> None:
    """Drop the trigger and the table (the hours stay marked dirty: the next rollup judges them again)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER ledger_dirty_hours_unreprice ON ledger_dirty_hours")
        op.execute("DROP FUNCTION ledger_dirty_hours_unreprice()")
    else:
        op.execute("DROP TRIGGER ledger_dirty_hours_unreprice")
    op.drop_table("ledger_repriced_hours")
