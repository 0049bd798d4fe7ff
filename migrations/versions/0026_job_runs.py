"""job runs: a job row per run, unique by (scheduler, cluster, job_id_raw, start), so that the earlier runs of a
requeued Slurm job are kept beside its last

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29 04:30:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Replace the one-row-per-job key with one row per run; the rows stored so far are each one run."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_scheduler", type_="unique")
        batch.create_unique_constraint("uq_jobs_run", ["scheduler", "cluster", "job_id_raw", "start"])


def downgrade() -> None:
    """Back to one row per job: of a job's runs, only the one that started last is kept (as 0021 would have)."""
    op.execute(
        "DELETE FROM jobs WHERE EXISTS (SELECT 1 FROM jobs later WHERE later.scheduler = jobs.scheduler "
        "AND later.cluster = jobs.cluster AND later.job_id_raw = jobs.job_id_raw AND later.start > jobs.start)"
    )
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_run", type_="unique")
        batch.create_unique_constraint("uq_jobs_scheduler", ["scheduler", "cluster", "job_id_raw"])
