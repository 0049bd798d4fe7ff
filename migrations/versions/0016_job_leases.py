"""job_leases: one row per scheduled job saying which scheduler process runs it and until when, so that several
``serve`` and ``scheduler`` processes on one PostgreSQL run each job once (docs/deployment.md, Several replicas)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table, empty: the first scheduler to start takes every lease."""
    op.create_table(
        "job_leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("acquired_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_job_leases")),
    )


def downgrade() -> None:
    """Drop the table: schedulers of the previous version take no lease (run one scheduler only)."""
    op.drop_table("job_leases")
