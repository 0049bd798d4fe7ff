"""Importing Slurm jobs through the CLI: placement, idempotent re-import, bad lines, running jobs ending."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from finops.db.ledger_tables import DirtyHour
from finops.db.models import Allocation, Gpu, Job, Node
from finops.jobs.slurm_import import ImportResult, import_sacct, per_node_counts

SACCT = Path(__file__).parents[1] / "fixtures" / "sacct"


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FINOPS_DATABASE_URL": database_url}
    return subprocess.run([sys.executable, "-m", "finops.cli", *args], capture_output=True, text=True, env=env)


def test_per_node_counts_split_evenly_then_first_nodes() -> None:
    assert per_node_counts(32, 4) == [8, 8, 8, 8]
    assert per_node_counts(10, 4) == [3, 3, 2, 2]


def test_import_places_jobs_and_reimport_changes_nothing(engine, sessions, database_url: str) -> None:  # type: ignore[no-untyped-def]
    first = _cli(database_url, "import", "sacct", str(SACCT / "sacct_orion.txt"), "--timezone", "Europe/Berlin")
    assert first.returncode == 0, first.stderr
    assert "imported 11 GPU jobs" in first.stdout
    with sessions() as session:
        jobs = {job.job_id: job for job in session.scalars(select(Job))}
        per_node = Counter(
            session.execute(
                select(Node.hostname)
                .join(Gpu, Gpu.node_id == Node.id)
                .join(Allocation, Allocation.gpu_id == Gpu.id)
                .join(Job, Job.id == Allocation.job_pk)
                .where(Job.job_id == "812344")
            ).scalars()
        )
        allocations = session.scalar(select(func.count()).select_from(Allocation))
    assert {"812400_3", "812500+0", "812377"} <= set(jobs) and "812455" not in jobs and "812390" not in jobs
    assert jobs["812377"].state == "CANCELLED"
    assert jobs["812400_3"].end is None and jobs["812400_3"].job_id_raw != "812400_3"
    assert per_node == {"gpu-h-01": 8, "gpu-h-02": 8, "gpu-h-03": 8, "gpu-h-07": 8}
    again = _cli(database_url, "import", "sacct", str(SACCT / "sacct_orion.txt"), "--timezone", "Europe/Berlin")
    assert again.returncode == 0
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Allocation)) == allocations
        assert session.scalar(select(func.count()).select_from(Job)) == len(jobs)


def test_bad_lines_are_named_and_the_rest_imported(engine, database_url: str) -> None:  # type: ignore[no-untyped-def]
    result = _cli(database_url, "import", "sacct", str(SACCT / "sacct_bad_lines.txt"))
    assert result.returncode == 1
    assert "sacct_bad_lines.txt:4: field NodeList" in result.stderr
    assert "sacct_bad_lines.txt:1:" in result.stderr
    assert "imported" in result.stdout and "0 GPU jobs" not in result.stdout


def _reimported(session: Session, before: str, after: str) -> ImportResult:
    """Import the sacct line ``before``, forget the hours it marked dirty, then import ``after``."""
    import_sacct(session, [before], source="a")
    session.execute(delete(DirtyHour))
    return import_sacct(session, [after], source="b")


def test_a_running_job_that_ends_is_cut_and_its_hours_rebuilt(sessions) -> None:  # type: ignore[no-untyped-def]
    head = "9|9|c|gpu|acct|ann|2026-01-05T10:00:00|2026-01-05T10:00:00"
    running = f"{head}|Unknown|01:00:00|RUNNING|gres/gpu=2|n1|x"
    ended = f"{head}|2026-01-05T12:30:00|02:30:00|COMPLETED|gres/gpu=2|n1|x"
    with sessions.begin() as session:
        _reimported(session, running, ended)
        ends = set(session.scalars(select(Allocation.end)))
        dirty = sorted(h.isoformat() for h in session.scalars(select(DirtyHour.hour)))[:1]
        job = session.scalars(select(Job)).one()
    assert len(ends) == 1 and next(iter(ends)).isoformat() == "2026-01-05T12:30:00+00:00"
    assert job.state == "COMPLETED"
    assert dirty == ["2026-01-05T12:00:00+00:00"]


def _runs(session: Session) -> list[tuple[str, str, int, str, set[str], list[tuple[int, int | None]]]]:
    """Each stored run: (job id, state, start hour, node list, hosts of its allocations, its allocations' hours)."""
    runs = []
    for job in session.scalars(select(Job).order_by(Job.start)):
        rows = session.execute(
            select(Node.hostname, Allocation.start, Allocation.end)
            .join(Gpu, Gpu.node_id == Node.id)
            .join(Allocation)
            .where(Allocation.job_pk == job.id)
        ).all()
        spans = sorted({(start.hour, None if end is None else end.hour) for _, start, end in rows})
        runs.append((job.job_id, job.state, job.start.hour, job.node_list, {host for host, _, _ in rows}, spans))
    return runs


def test_a_requeued_job_keeps_its_earlier_run(sessions) -> None:  # type: ignore[no-untyped-def]
    """Slurm requeues a job (after a node failure) under the same JobIDRaw with a later start. A listing that
    carries only the new run adds it beside the stored one, which ended before it: both runs are billed, each on
    its own node over its own hours."""
    head = "77|77|c|gpu|acct|ann|2026-01-05T09:00:00"
    first = f"{head}|2026-01-05T09:10:00|2026-01-05T10:20:00|01:10:00|NODE_FAIL|gres/gpu=2|n1|x"
    again = f"{head}|2026-01-05T13:00:00|2026-01-05T14:30:00|01:30:00|COMPLETED|gres/gpu=2|n2|x"
    with sessions.begin() as session:
        assert _reimported(session, first, again).jobs == 1
    with sessions() as session:
        dirty = sorted(h.hour for h in session.scalars(select(DirtyHour.hour)))
        assert _runs(session) == [
            ("77", "NODE_FAIL", 9, "n1", {"n1"}, [(9, 10)]),
            ("77", "COMPLETED", 13, "n2", {"n2"}, [(13, 14)]),
        ]
    assert dirty == [13, 14], "the earlier run is unchanged: only the new run's hours are rebuilt"


def test_every_run_of_a_requeued_job_in_one_listing_is_kept(sessions) -> None:  # type: ignore[no-untyped-def]
    """``sacct --duplicates`` lists every run of a requeued job under its JobIDRaw, in any order (here as Slurm 22.05
    printed a job requeued with ``scontrol requeue``: the earlier run REQUEUED with its own Submit). Each run is
    stored with its own GPUs, nodes, times and account, and a second import changes nothing."""
    runs = [
        "78|78|c|gpu|vision|ann|2026-01-05T12:59:00|2026-01-05T13:00:00|2026-01-05T14:30:00|01:30:00|COMPLETED|"
        "billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,node=1|n2|x",
        "78|78|c|gpu|speech|ann|2026-01-05T09:00:00|2026-01-05T09:10:00|2026-01-05T10:20:00|01:10:00|REQUEUED|"
        "billing=1,cpu=1,gres/gpu:h100=4,gres/gpu=4,node=2|n[1,3]|x",
    ]
    with sessions.begin() as session:
        assert import_sacct(session, runs, source="a").jobs == 2
    with sessions.begin() as session:
        session.execute(delete(DirtyHour))
        assert import_sacct(session, reversed(runs), source="b").jobs == 2
    with sessions() as session:
        assert _runs(session) == [
            ("78", "REQUEUED", 9, "n[1,3]", {"n1", "n3"}, [(9, 10)]),
            ("78", "COMPLETED", 13, "n2", {"n2"}, [(13, 14)]),
        ]
        assert [job.account for job in session.scalars(select(Job).order_by(Job.start))] == ["speech", "vision"]
        assert session.scalar(select(func.count()).select_from(Allocation)) == 4 + 2
        assert session.scalar(select(func.count()).select_from(DirtyHour)) == 0, "the same runs again: nothing new"


def test_a_later_run_replaces_a_stored_run_it_overlaps(sessions) -> None:  # type: ignore[no-untyped-def]
    """A run stored while it ran (End Unknown) and then listed only by its successor (a listing without
    ``--duplicates``) overlaps that successor: one job never runs twice at once, so the open run is replaced, as the
    listing is all that is known of the job."""
    head = "79|79|c|gpu|acct|ann|2026-01-05T09:00:00"
    running = f"{head}|2026-01-05T09:10:00|Unknown|01:00:00|RUNNING|gres/gpu=2|n1|x"
    later = f"{head}|2026-01-05T13:00:00|2026-01-05T14:30:00|01:30:00|COMPLETED|gres/gpu=2|n2|x"
    with sessions.begin() as session:
        _reimported(session, running, later)
        dirty = {h.isoformat() for h in session.scalars(select(DirtyHour.hour))}
    with sessions() as session:
        assert _runs(session) == [("79", "COMPLETED", 13, "n2", {"n2"}, [(13, 14)])]
    replaced = {"2026-01-05T09:00:00+00:00", "2026-01-05T10:00:00+00:00"}
    assert replaced <= dirty, "the replaced run's hours are rebuilt"
