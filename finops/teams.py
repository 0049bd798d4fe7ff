"""Teams and the Slurm account → team mapping. Unmapped accounts land in ``__unmapped__``, never dropped."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from finops.hours import mark_job_hours_dirty
from finops.models import UNMAPPED_TEAM, AccountTeam, Job, Team
from finops.rows import get_or_create


def team_by_name(session: Session, name: str) -> Team:
    """The team called ``name``, created if new."""
    return get_or_create(session, Team, name=name)


def team_for_account(session: Session, account: str) -> Team:
    """The team ``account`` maps to, or ``__unmapped__``."""
    team = session.scalars(
        select(Team).join(AccountTeam, AccountTeam.team_id == Team.id).where(AccountTeam.account == account)
    ).one_or_none()
    return team if team is not None else team_by_name(session, UNMAPPED_TEAM)


def map_account(session: Session, account: str, team_name: str) -> int:
    """Map Slurm ``account`` to ``team_name`` (created if new); re-home that account's jobs.

    The ledger hours of re-homed jobs are marked for rebuild. Returns how many jobs moved.
    """
    team = team_by_name(session, team_name)
    mapping = session.get(AccountTeam, account)
    if mapping is None:
        session.add(AccountTeam(account=account, team_id=team.id))
    else:
        mapping.team_id = team.id
    moved = session.scalars(select(Job).where(Job.account == account, Job.team_id != team.id)).all()
    for job in moved:
        mark_job_hours_dirty(session, job)
    session.execute(update(Job).where(Job.account == account).values(team_id=team.id))
    session.flush()
    return len(moved)
