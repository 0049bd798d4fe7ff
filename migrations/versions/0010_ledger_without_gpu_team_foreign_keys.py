"""drop the ledger's foreign keys to gpus and teams: the rollup writes its rows from those tables' own ids, and
neither GPUs nor teams are ever deleted, so the per-row checks (a third of writing the ledger) guard nothing

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 17:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Drop fk_ledger_gpu_id_gpus and fk_ledger_team_id_teams; fk_ledger_job_pk_jobs stays (a deleted job's rows
    lose their job until they are rebuilt)."""
    with op.batch_alter_table("ledger") as batch:
        batch.drop_constraint("fk_ledger_gpu_id_gpus", type_="foreignkey")
        batch.drop_constraint("fk_ledger_team_id_teams", type_="foreignkey")


def downgrade() -> None:
    """Create both again (they validate the existing rows)."""
    with op.batch_alter_table("ledger") as batch:
        batch.create_foreign_key("fk_ledger_gpu_id_gpus", "gpus", ["gpu_id"], ["id"])
        batch.create_foreign_key("fk_ledger_team_id_teams", "teams", ["team_id"], ["id"])
