"""alerts: alert instances, notification groups with their notification log, silences, the delivery outbox

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-23 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0003"
branch_labels = None
depends_on = None

EPOCH = sa.BigInteger()


def upgrade() -> None:
    op.create_table(
        "alert_instances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("starts_at", EPOCH, nullable=False),
        sa.Column("ends_at", EPOCH, nullable=True),
        sa.Column("last_evaluated_at", EPOCH, nullable=False),
        sa.Column("group_key", sa.String(length=16), nullable=False),
        sa.CheckConstraint("state IN ('firing', 'resolved')", name=op.f("ck_alert_instances_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_instances")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_alert_instances_fingerprint")),
    )
    op.create_index(op.f("ix_alert_instances_rule"), "alert_instances", ["rule"], unique=False)
    op.create_index(op.f("ix_alert_instances_state"), "alert_instances", ["state"], unique=False)
    op.create_index(op.f("ix_alert_instances_group_key"), "alert_instances", ["group_key"], unique=False)
    op.create_table(
        "alert_groups",
        sa.Column("key", sa.String(length=16), nullable=False),
        sa.Column("route", sa.String(length=128), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("created_at", EPOCH, nullable=False),
        sa.Column("next_check_at", EPOCH, nullable=True),
        sa.Column("notified_at", EPOCH, nullable=True),
        sa.Column("notified_firing", sa.JSON(), nullable=False),
        sa.Column("notified_resolved", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_alert_groups")),
    )
    op.create_index(op.f("ix_alert_groups_next_check_at"), "alert_groups", ["next_check_at"], unique=False)
    op.create_table(
        "alert_silences",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("starts_at", EPOCH, nullable=False),
        sa.Column("ends_at", EPOCH, nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_at", EPOCH, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_silences")),
    )
    op.create_index(op.f("ix_alert_silences_ends_at"), "alert_silences", ["ends_at"], unique=False)
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_key", sa.String(length=16), nullable=True),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("target", sa.String(length=1024), nullable=False),
        sa.Column("title", sa.String(length=255), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", EPOCH, nullable=False),
        sa.Column("next_attempt_at", EPOCH, nullable=False),
        sa.Column("deadline", EPOCH, nullable=False),
        sa.Column("last_attempt_at", EPOCH, nullable=True),
        sa.Column("delivered_at", EPOCH, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'failed', 'refused')", name=op.f("ck_alert_deliveries_status")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_deliveries")),
    )
    op.create_index("ix_alert_deliveries_status_next", "alert_deliveries", ["status", "next_attempt_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_alert_deliveries_status_next", table_name="alert_deliveries")
    op.drop_table("alert_deliveries")
    op.drop_index(op.f("ix_alert_silences_ends_at"), table_name="alert_silences")
    op.drop_table("alert_silences")
    op.drop_index(op.f("ix_alert_groups_next_check_at"), table_name="alert_groups")
    op.drop_table("alert_groups")
    op.drop_index(op.f("ix_alert_instances_group_key"), table_name="alert_instances")
    op.drop_index(op.f("ix_alert_instances_state"), table_name="alert_instances")
    op.drop_index(op.f("ix_alert_instances_rule"), table_name="alert_instances")
    op.drop_table("alert_instances")
