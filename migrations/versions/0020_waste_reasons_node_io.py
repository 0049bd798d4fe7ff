"""waste reasons: node_io_hours (a node's fabric and storage rates per hour, from the collectors' node_io part) and
each idle episode's probable reason with its evidence

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27 05:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``node_io_hours`` (empty: collectors send their rates from now on) and add ``reason`` and ``evidence``
    to ``idle_episodes``, NULL for the episodes stored so far until they are judged again."""
    op.create_table(
        "node_io_hours",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("readings", sa.Integer(), nullable=False),
        sa.Column("rate_sum", sa.Float(), nullable=False),
        sa.Column("rate_max", sa.Float(), nullable=False),
        sa.Column("last_ts", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_node_io_hours_node_id_nodes")),
        sa.PrimaryKeyConstraint("node_id", "hour", "kind", name=op.f("pk_node_io_hours")),
    )
    op.create_index(op.f("ix_node_io_hours_hour"), "node_io_hours", ["hour"])
    with op.batch_alter_table("idle_episodes") as batch:
        batch.add_column(sa.Column("reason", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("evidence", sa.String(length=255), nullable=True))


def downgrade() -> None:
    """Drop the rates and the episodes' reasons (the rates come again with the collectors' next batches; the reasons
    with the next judgement of the episodes)."""
    with op.batch_alter_table("idle_episodes") as batch:
        batch.drop_column("evidence")
        batch.drop_column("reason")
    op.drop_index(op.f("ix_node_io_hours_hour"), table_name="node_io_hours")
    op.drop_table("node_io_hours")
