"""one sacct watermark per cluster: ``sacct:default`` merged into the cluster's own name when the jobs name one

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-01 11:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """When a ``sacct:default`` watermark exists and the Slurm jobs stored name exactly one cluster X (other than
    ``default``), ``default`` was X: ``sacct:X`` takes the later of the two instants and ``sacct:default`` goes
    (:mod:`finops.jobs.sacct_watermark`). With several clusters, which one ``default`` was is unknown, and both
    stay; the next ``default`` run merges them."""
    bind = op.get_bind()
    unnamed = bind.scalar(sa.text("SELECT value FROM watermarks WHERE name = 'sacct:default'"))
    if unnamed is None:
        return
    clusters = bind.scalars(
        sa.text("SELECT DISTINCT cluster FROM jobs WHERE scheduler = 'slurm' AND cluster <> 'default'")
    ).all()
    if len(clusters) != 1:
        return
    name = f"sacct:{clusters[0]}"
    named = bind.scalar(sa.text("SELECT value FROM watermarks WHERE name = :name"), {"name": name})
    if named is None:
        bind.execute(
            sa.text("INSERT INTO watermarks (name, value) VALUES (:name, :value)"), {"name": name, "value": unnamed}
        )
    elif named < unnamed:
        bind.execute(
            sa.text("UPDATE watermarks SET value = :value WHERE name = :name"), {"name": name, "value": unnamed}
        )
    bind.execute(sa.text("DELETE FROM watermarks WHERE name = 'sacct:default'"))


def downgrade() -> None:
    """Nothing to undo: the merged watermark serves a run under either name."""
