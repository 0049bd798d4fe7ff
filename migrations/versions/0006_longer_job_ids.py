"""longer job ids: jobs.job_id and gpu_samples.job_id hold a Kubernetes namespace/pod (317 characters)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 08:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

LONG, SHORT = sa.String(length=317), sa.String(length=64)


def upgrade() -> None:
    # On PostgreSQL, altering the partitioned gpu_samples alters every partition.
    for table in ("jobs", "gpu_samples"):
        with op.batch_alter_table(table) as batch:
            batch.alter_column("job_id", type_=LONG, existing_type=SHORT)


def downgrade() -> None:
    """Back to 64 characters; fails (and changes nothing) while a longer job id is stored."""
    for table in ("jobs", "gpu_samples"):
        with op.batch_alter_table(table) as batch:
            batch.alter_column("job_id", type_=SHORT, existing_type=LONG)
