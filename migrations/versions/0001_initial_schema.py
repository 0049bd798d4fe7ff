"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 07:51:44.116294
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# NUMERIC on PostgreSQL; integer micro-units on SQLite, which has no exact decimal type (finops.db.sqltypes.Money).
MONEY = sa.Numeric(precision=20, scale=6).with_variant(sa.BigInteger(), "sqlite")

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_dirty_hours",
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", name=op.f("pk_ledger_dirty_hours")),
    )
    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nodes")),
        sa.UniqueConstraint("hostname", name=op.f("uq_nodes_hostname")),
    )
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_teams")),
        sa.UniqueConstraint("name", name=op.f("uq_teams_name")),
    )
    op.create_table(
        "account_teams",
        sa.Column("account", sa.String(length=128), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_account_teams_team_id_teams")),
        sa.PrimaryKeyConstraint("account", name=op.f("pk_account_teams")),
    )
    op.create_table(
        "budgets",
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("month", sa.BigInteger(), nullable=False),
        sa.Column("amount", MONEY, nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_budgets_team_id_teams")),
        sa.PrimaryKeyConstraint("team_id", "month", name=op.f("pk_budgets")),
    )
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=64), nullable=True),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("memory_total_bytes", sa.BigInteger(), nullable=True),
        sa.Column("in_service_from", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_gpus_node_id_nodes")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpus")),
        sa.UniqueConstraint("node_id", "gpu_index", name=op.f("uq_gpus_node_id")),
        sa.UniqueConstraint("uuid", name=op.f("uq_gpus_uuid")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("scheduler", sa.String(length=16), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("job_id_raw", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("account", sa.String(length=128), nullable=False),
        sa.Column("partition", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("submit", sa.BigInteger(), nullable=True),
        sa.Column("start", sa.BigInteger(), nullable=True),
        sa.Column("end", sa.BigInteger(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sa.String(length=64), nullable=True),
        sa.Column("node_list", sa.String(length=4096), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_jobs_team_id_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("scheduler", "cluster", "job_id_raw", name=op.f("uq_jobs_scheduler")),
    )
    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("end", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_allocations_gpu_id_gpus")),
        sa.ForeignKeyConstraint(["job_pk"], ["jobs.id"], name=op.f("fk_allocations_job_pk_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocations")),
    )
    op.create_index("ix_allocations_gpu_start", "allocations", ["gpu_id", "start"], unique=False)
    op.create_index(op.f("ix_allocations_job_pk"), "allocations", ["job_pk"], unique=False)
    op.create_table(
        "gpu_samples",
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("utilization_ratio", sa.Float(), nullable=True),
        sa.Column("memory_utilization_ratio", sa.Float(), nullable=True),
        sa.Column("memory_used_bytes", sa.BigInteger(), nullable=True),
        sa.Column("power_watts", sa.Float(), nullable=True),
        sa.Column("energy_joules", sa.Float(), nullable=True),
        sa.Column("temperature_celsius", sa.Float(), nullable=True),
        sa.Column("sm_clock_hertz", sa.Float(), nullable=True),
        sa.Column("clocks_event_reasons", sa.BigInteger(), nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_samples_gpu_id_gpus")),
        sa.PrimaryKeyConstraint("gpu_id", "ts", name=op.f("pk_gpu_samples")),
    )
    op.create_table(
        "idle_episodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("end", sa.BigInteger(), nullable=False),
        sa.Column("memory_held", sa.Boolean(), nullable=False),
        sa.Column("cost", MONEY, nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_idle_episodes_gpu_id_gpus")),
        sa.ForeignKeyConstraint(["job_pk"], ["jobs.id"], name=op.f("fk_idle_episodes_job_pk_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idle_episodes")),
        sa.UniqueConstraint("gpu_id", "job_pk", "start", name=op.f("uq_idle_episodes_gpu_id")),
    )
    op.create_index(op.f("ix_idle_episodes_job_pk"), "idle_episodes", ["job_pk"], unique=False)
    op.create_table(
        "ledger",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=True),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Integer(), nullable=False),
        sa.Column("used_gpu_seconds", sa.Float(), nullable=False),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("energy_joules", sa.Float(), nullable=False),
        sa.Column("allocated_cost", MONEY, nullable=False),
        sa.Column("used_cost", MONEY, nullable=False),
        sa.Column("idle_cost", MONEY, nullable=False),
        sa.Column("energy_cost", MONEY, nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_ledger_gpu_id_gpus")),
        sa.ForeignKeyConstraint(["job_pk"], ["jobs.id"], name=op.f("fk_ledger_job_pk_jobs"), ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_ledger_team_id_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger")),
    )
    op.create_index(op.f("ix_ledger_hour"), "ledger", ["hour"], unique=False)
    op.create_index("ix_ledger_hour_team", "ledger", ["hour", "team_id"], unique=False)
    op.create_index(op.f("ix_ledger_job_pk"), "ledger", ["job_pk"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_ledger_job_pk"), table_name="ledger")
    op.drop_index("ix_ledger_hour_team", table_name="ledger")
    op.drop_index(op.f("ix_ledger_hour"), table_name="ledger")
    op.drop_table("ledger")
    op.drop_index(op.f("ix_idle_episodes_job_pk"), table_name="idle_episodes")
    op.drop_table("idle_episodes")
    op.drop_table("gpu_samples")
    op.drop_index(op.f("ix_allocations_job_pk"), table_name="allocations")
    op.drop_index("ix_allocations_gpu_start", table_name="allocations")
    op.drop_table("allocations")
    op.drop_table("jobs")
    op.drop_table("gpus")
    op.drop_table("budgets")
    op.drop_table("account_teams")
    op.drop_table("teams")
    op.drop_table("nodes")
    op.drop_table("ledger_dirty_hours")
