"""node_tokens: per-node collector credentials (``gpu-finops nodes token create|list|revoke``)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table, empty: sites keep their shared ``FINOPS_INGEST_TOKEN`` until they make node tokens."""
    op.create_table(
        "node_tokens",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.Column("last_used_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_tokens")),
    )
    op.create_index(op.f("ix_node_tokens_node"), "node_tokens", ["node"])


def downgrade() -> None:
    """Drop the table: collectors holding node tokens are refused until a shared token is set."""
    op.drop_index(op.f("ix_node_tokens_node"), table_name="node_tokens")
    op.drop_table("node_tokens")
