"""Importing Slurm jobs through the CLI: placement, idempotent re-import, bad lines, running jobs ending."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from finops.db.models import Allocation, DirtyHour, Gpu, Job, Node
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


def test_a_requeued_job_replaces_its_earlier_run(sessions) -> None:  # type: ignore[no-untyped-def]
    """Slurm requeues a job (after a node failure) under the same JobIDRaw with a later start. The import that
    carries only the new run finds the stored one whatever its start, and replaces it; the earlier run's hours
    and the new run's are marked for rebuild."""
    head = "77|77|c|gpu|acct|ann|2026-01-05T09:00:00"
    first = f"{head}|2026-01-05T09:10:00|2026-01-05T10:20:00|01:10:00|NODE_FAIL|gres/gpu=2|n1|x"
    again = f"{head}|2026-01-05T13:00:00|2026-01-05T14:30:00|01:30:00|COMPLETED|gres/gpu=2|n2|x"
    with sessions.begin() as session:
        assert _reimported(session, first, again).jobs == 1
    with sessions() as session:
        job = session.scalars(select(Job)).one()
        hosts = set(
            session.scalars(
                select(Node.hostname)
                .join(Gpu, Gpu.node_id == Node.id)
                .join(Allocation)
                .where(Allocation.job_pk == job.id)
            )
        )
        dirty = sorted(h.hour for h in session.scalars(select(DirtyHour.hour)))
    assert (job.node_list, job.state, job.start.hour) == ("n2", "COMPLETED", 13)
    assert hosts == {"n2"}
    assert dirty == [9, 10, 13, 14]


def test_the_runs_of_a_requeued_job_in_one_listing_keep_the_last(sessions) -> None:  # type: ignore[no-untyped-def]
    """``sacct --duplicates`` lists every run of a requeued job under its JobIDRaw: the import keeps the last."""
    head = "78|78|c|gpu|acct|ann|2026-01-05T09:00:00"
    runs = [
        f"{head}|2026-01-05T13:00:00|2026-01-05T14:30:00|01:30:00|COMPLETED|gres/gpu=2|n2|x",
        f"{head}|2026-01-05T09:10:00|2026-01-05T10:20:00|01:10:00|NODE_FAIL|gres/gpu=2|n1|x",
    ]
    with sessions.begin() as session:
        assert import_sacct(session, runs, source="a").jobs == 1
    with sessions() as session:
        job = session.scalars(select(Job)).one()
        assert (job.node_list, job.state) == ("n2", "COMPLETED")
        assert session.scalar(select(func.count()).select_from(Allocation)) == 2
