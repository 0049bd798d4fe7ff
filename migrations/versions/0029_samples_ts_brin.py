"""gpu_samples ts BRIN: a BRIN index on the readings' instant (PostgreSQL), so that a part of a day is read from the
pages that hold it instead of by a scan of the day's partition

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-03 09:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """PostgreSQL: the index on the partitioned table, and so on every day partition, those made later too (each
    partition's BRIN summary is built by one pass over it). Ingest writes readings about in time order, so each range
    of 16 pages holds a few seconds to minutes; ``autosummarize`` summarises a range once it is full. SQLite reads
    per GPU by the primary key and gets none."""
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(
            "ix_gpu_samples_ts_brin", "gpu_samples", ["ts"], postgresql_using="brin",
            postgresql_with={"pages_per_range": "16", "autosummarize": "on"},
        )  # fmt: skip


def downgrade() -> None:
    """Drop the index (PostgreSQL)."""
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_gpu_samples_ts_brin", table_name="gpu_samples")
