"""team_precedence_claimed_users: the site's team rule precedence (``site_options``; namespace rules before a pod's
own labels unless the site says otherwise) and Kubernetes users stored as claimed (``claimed:alice``)

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-10 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_HOUR = 3600


def upgrade() -> None:
    """Create ``site_options`` (empty: the default precedence, namespace first), mark the users of stored pods as
    claimed, and give every pod whose namespace or account has a rule that rule's team (before, a label rule could
    win), marking the ledger hours of the jobs that move dirty so the next rollup re-bills them."""
    op.create_table(
        "site_options",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_site_options")),
    )
    op.execute(
        'UPDATE jobs SET "user" = \'claimed:\' || "user" '
        "WHERE scheduler = 'kubernetes' AND \"user\" <> '' AND \"user\" NOT LIKE 'claimed:%'"
    )
    bind = op.get_bind()
    rules = {
        (kind, value): team
        for kind, value, team in bind.execute(
            sa.text("SELECT kind, value, team_id FROM team_rules WHERE kind IN ('namespace', 'account')")
        )
    }
    if not rules:
        return
    pods = "SELECT id, account, namespace, team_id, start, \"end\" FROM jobs WHERE scheduler = 'kubernetes'"
    jobs = bind.execute(sa.text(pods))
    moved: list[dict[str, int]] = []
    hours: set[int] = set()
    now = int(bind.execute(sa.text("SELECT MAX(hour) FROM ledger")).scalar() or 0) + _HOUR
    for job_id, account, namespace, team_id, start, end in jobs:
        team = rules.get(("namespace", namespace), rules.get(("account", account)))
        if team is not None and team != team_id:
            moved.append({"job": job_id, "team": team})
            if start is not None:
                hours.update(range(start - start % _HOUR, max(end if end is not None else now, start + 1), _HOUR))
    if moved:
        bind.execute(sa.text("UPDATE jobs SET team_id = :team WHERE id = :job"), moved)
        known = {hour for (hour,) in bind.execute(sa.text("SELECT hour FROM ledger_dirty_hours"))}
        fresh = [{"hour": hour} for hour in sorted(hours - known)]
        if fresh:
            bind.execute(sa.text("INSERT INTO ledger_dirty_hours (hour) VALUES (:hour)"), fresh)


def downgrade() -> None:
    """Drop ``site_options`` (the previous version tries labels first) and unmark claimed users; the jobs keep the
    team they have until a team rule changes."""
    op.drop_table("site_options")
    op.execute(
        'UPDATE jobs SET "user" = substr("user", 9) WHERE scheduler = \'kubernetes\' AND "user" LIKE \'claimed:%\''
    )
