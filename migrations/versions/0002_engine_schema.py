"""engine schema: team rules, Kubernetes job fields, shared-GPU allocations, budget projects, events,
pricing rules and the ledger's pricing model, imported price catalogs, import watermarks

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 06:45:41.173480
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

EPOCH = sa.BigInteger()


def upgrade() -> None:
    op.create_table(
        "price_catalogs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("imported_at", EPOCH, nullable=False),
        sa.Column("source", sa.String(length=1024), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_price_catalogs")),
    )
    op.create_table(
        "pricing_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("selector", sa.String(length=16), nullable=False),
        sa.Column("key", sa.String(length=253), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.Column("pricing_model", sa.String(length=16), nullable=False),
        sa.CheckConstraint("selector IN ('node', 'node_label', 'partition')", name=op.f("ck_pricing_rules_selector")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pricing_rules")),
        sa.UniqueConstraint("selector", "key", "value", name=op.f("uq_pricing_rules_selector")),
    )
    op.create_table(
        "watermarks",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("value", EPOCH, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_watermarks")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("dedupe_key", sa.String(length=255), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=True),
        sa.Column("occurred_at", EPOCH, nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("consumed_at", EPOCH, nullable=True),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_events_team_id_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_events_dedupe_key")),
    )
    op.create_index(op.f("ix_events_consumed_at"), "events", ["consumed_at"], unique=False)
    op.create_index(op.f("ix_events_kind"), "events", ["kind"], unique=False)
    op.create_table(
        "team_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("key", sa.String(length=253), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.CheckConstraint("kind IN ('label', 'namespace', 'account')", name=op.f("ck_team_rules_kind")),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_team_rules_team_id_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_team_rules")),
        sa.UniqueConstraint("kind", "key", "value", name=op.f("uq_team_rules_kind")),
    )
    op.execute(
        "INSERT INTO team_rules (kind, key, value, team_id) SELECT 'account', '', account, team_id FROM account_teams"
    )
    op.drop_table("account_teams")
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("share_num", sa.Integer(), server_default="1", nullable=False))
        batch.add_column(sa.Column("share_den", sa.Integer(), server_default="1", nullable=False))
        batch.add_column(sa.Column("mig_profile", sa.String(length=32), nullable=True))
        batch.create_check_constraint(op.f("ck_allocations_share"), "share_num > 0 AND share_num <= share_den")
    with op.batch_alter_table("budgets") as batch:
        batch.add_column(sa.Column("project", sa.String(length=128), server_default="", nullable=False))
        batch.drop_constraint("pk_budgets", type_="primary")
        batch.create_primary_key("pk_budgets", ["team_id", "month", "project"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("namespace", sa.String(length=253), nullable=True))
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("project", sa.String(length=128), nullable=True))
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("partition", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=True))
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("pricing_model", sa.String(length=16), nullable=True))


def downgrade() -> None:
    """Back to 0001. Kubernetes label/namespace team rules, project budgets and shares are lost; account rules
    go back to ``account_teams``."""
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("pricing_model")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("labels")
        batch.drop_column("partition")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("project")
        batch.drop_column("labels")
        batch.drop_column("namespace")
    op.execute("DELETE FROM budgets WHERE project <> ''")
    with op.batch_alter_table("budgets") as batch:
        batch.drop_constraint("pk_budgets", type_="primary")
        batch.create_primary_key("pk_budgets", ["team_id", "month"])
        batch.drop_column("project")
    with op.batch_alter_table("allocations") as batch:
        batch.drop_constraint(op.f("ck_allocations_share"), type_="check")
        batch.drop_column("mig_profile")
        batch.drop_column("share_den")
        batch.drop_column("share_num")
    op.create_table(
        "account_teams",
        sa.Column("account", sa.String(length=128), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_account_teams_team_id_teams")),
        sa.PrimaryKeyConstraint("account", name=op.f("pk_account_teams")),
    )
    op.execute(
        "INSERT INTO account_teams (account, team_id) SELECT value, team_id FROM team_rules WHERE kind = 'account'"
    )
    op.drop_table("team_rules")
    op.drop_index(op.f("ix_events_kind"), table_name="events")
    op.drop_index(op.f("ix_events_consumed_at"), table_name="events")
    op.drop_table("events")
    op.drop_table("watermarks")
    op.drop_table("pricing_rules")
    op.drop_table("price_catalogs")
