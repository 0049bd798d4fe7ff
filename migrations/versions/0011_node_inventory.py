"""nodes.gpu_model and nodes.partitions: the node inventory (``gpu-finops nodes import|set-model``)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add both columns, NULL for every existing node (no inventory yet)."""
    op.add_column("nodes", sa.Column("gpu_model", sa.String(length=128), nullable=True))
    op.add_column("nodes", sa.Column("partitions", sa.String(length=1024), nullable=True))


def downgrade() -> None:
    """Drop both (the inventory is lost; GPUs keep the models it gave them). Plain ``ALTER TABLE … DROP COLUMN``
    (SQLite 3.35+), not a batch table copy: the copy would drop ``nodes`` under the foreign keys of ``gpus``."""
    op.drop_column("nodes", "partitions")
    op.drop_column("nodes", "gpu_model")
