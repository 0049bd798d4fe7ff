"""Re-homing jobs when team rules change: which jobs move, which hours are marked, what loaded jobs read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.ledger_tables import DirtyHour
from finops.db.models import UNMAPPED_TEAM, Job, Team
from finops.jobs import teams
from finops.jobs.teams import delete_rule, set_rule, team_by_name
from finops.timeutil import HOUR, to_epoch

T0 = datetime(2026, 10, 5, 8, 0, tzinfo=UTC)


def _job(n: int, account: str, start: datetime | None, end: datetime | None, team_id: int, **kw: object) -> Job:
    return Job(
        scheduler="slurm", cluster="c", job_id=str(n), job_id_raw=str(n), user="u", account=account, partition="p",
        name="j", state="COMPLETED", start=start, end=end, gpus=1, node_list="n", team_id=team_id, **kw,
    )  # fmt: skip


def _dirty(session: Session) -> list[int]:
    return [to_epoch(hour) for hour in session.scalars(select(DirtyHour.hour).order_by(DirtyHour.hour))]


def test_only_moved_jobs_mark_their_hours_and_loaded_jobs_read_the_new_team(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(teams, "REHOME_BATCH", 3)  # several batches of the streamed read
    with sessions.begin() as session:
        unmapped = team_by_name(session, UNMAPPED_TEAM).id
        vision = team_by_name(session, "vision").id
        moving = [
            _job(1, "cv", T0, T0 + timedelta(minutes=30), unmapped),  # hour 8
            _job(2, "cv", T0 + timedelta(hours=2, minutes=59), T0 + timedelta(hours=3, minutes=1), unmapped),  # 10, 11
            _job(3, "cv", None, None, unmapped),  # pending: moves, no hours
        ]
        staying = [_job(10 + i, "nlp", T0 + timedelta(hours=20 + i), None, unmapped) for i in range(5)]
        already = _job(20, "cv", T0 + timedelta(hours=30), T0 + timedelta(hours=31), vision)
        x_team = team_by_name(session, "x-team").id
        labelled = _job(21, "lab", T0 + timedelta(hours=40), T0 + timedelta(hours=41), x_team, labels={"team": "x"})
        assert (
            set_rule(session, "label", "team", "x", "x-team", actor="system:test") == 0
        )  # before the jobs: no job moves
        session.add_all([*moving, *staying, already, labelled])
        session.flush()

        assert set_rule(session, "account", "", "cv", "vision", actor="system:test") == 3
        # Objects loaded before the change read the new team; the others keep theirs.
        assert [job.team_id for job in moving] == [vision] * 3
        assert {job.team_id for job in staying} == {unmapped}
        assert labelled.team_id == x_team  # a label rule comes before the account's
        assert _dirty(session) == [to_epoch(T0), to_epoch(T0) + 2 * HOUR, to_epoch(T0) + 3 * HOUR]

    with sessions.begin() as session:
        session.execute(delete(DirtyHour))
        assert (
            delete_rule(session, "account", "", "cv", actor="system:test") == 4
        )  # the three, and the job already at vision
        rows = session.execute(select(Job.job_id, Team.name).join(Team, Team.id == Job.team_id)).all()
        assert {job_id for job_id, name in rows if name == UNMAPPED_TEAM} == {
            "1",
            "2",
            "3",
            "20",
            *map(str, range(10, 15)),
        }
        assert _dirty(session) == [to_epoch(T0) + h * HOUR for h in (0, 2, 3, 30)]


def test_a_rule_that_moves_nothing_marks_nothing(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        unmapped = team_by_name(session, UNMAPPED_TEAM).id
        session.add(_job(1, "cv", T0, T0 + timedelta(hours=1), unmapped))
        session.flush()
        assert set_rule(session, "account", "", "nobody", "vision", actor="system:test") == 0
        assert _dirty(session) == []
