"""The containers' way to Slurm's jobs: the head node's sacct over ssh with a key (docs/deployment.md, Slurm jobs in
containers), through a real OpenSSH server on 127.0.0.1. The "head node"'s sacct is a script that records how it
was called and prints the sacct fixture; the scheduler imports on its default schedule once FINOPS_SACCT_COMMAND
is set."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.models import Job
from finops.jobs.slurm_import import run_sacct
from tests.support.servers import scheduler_process
from tests.support.sshd import Sshd, sshd

FIXTURE = Path(__file__).parents[1] / "fixtures" / "sacct" / "sacct_orion.txt"
GPU_JOBS = 11
"""GPU jobs of the fixture (array tasks and the pending rest count one each; the CPU-only job none)."""

HEAD_SACCT = """\
import json, os, sys
with open({log!r}, "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "tz": os.environ.get("TZ"),
                          "time_format": os.environ.get("SLURM_TIME_FORMAT")}}) + "\\n")
with open({fixture!r}) as fixture:
    sys.stdout.write(fixture.read())
"""


@pytest.fixture
def head(tmp_path: Path) -> Sshd:  # type: ignore[misc]
    with sshd(tmp_path / "ssh") as server:
        yield server


def _head_sacct(tmp_path: Path) -> tuple[Path, Path]:
    """The head node's sacct (a script printing the fixture) and the log of its calls."""
    script, log = tmp_path / "head" / "sacct", tmp_path / "head" / "calls.jsonl"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n" + HEAD_SACCT.format(log=str(log), fixture=str(FIXTURE)))
    script.chmod(0o755)
    return script, log


def test_sacct_runs_on_the_head_node_in_utc(
    sessions: sessionmaker[Session], head: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, log = _head_sacct(tmp_path)
    monkeypatch.setenv("TZ", "Europe/Berlin")  # the client's zone travels nowhere: sacct gets TZ=UTC over there
    done = run_sacct(sessions, command=f"ssh -F {head.config} slurm-head {script}", cluster="orion")
    (call,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert (call["tz"], call["time_format"]) == ("UTC", "standard")
    assert call["argv"][:2] == ["--allusers", "--allocations"] and "--clusters=orion" in call["argv"]
    assert done.result.jobs == GPU_JOBS and not done.result.errors
    with sessions() as session:
        job = session.scalars(select(Job).where(Job.job_id == "812301")).one()
    start, end = datetime(2024, 3, 28, 9, 15, 10, tzinfo=UTC), datetime(2024, 3, 28, 17, 42, 55, tzinfo=UTC)
    assert (job.start, job.end) == (start, end)


def test_the_scheduler_imports_over_ssh_by_default_once_the_command_is_set(
    sessions: sessionmaker[Session], database_url: str, head: Sshd, tmp_path: Path
) -> None:
    script, log = _head_sacct(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != "FINOPS_SACCT_SCHEDULE_SECONDS"}
    env |= {"FINOPS_DATABASE_URL": database_url, "FINOPS_SACCT_COMMAND": f"ssh -F {head.config} slurm-head {script}"}
    with scheduler_process(env, tmp_path / "scheduler.log"):
        deadline = time.monotonic() + 60
        while not log.exists():
            assert time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
            time.sleep(0.2)
        while True:
            with sessions() as session:
                if len(session.scalars(select(Job)).all()) == GPU_JOBS:
                    break
            assert time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
            time.sleep(0.2)
    text = (tmp_path / "scheduler.log").read_text()
    assert f"Slurm jobs imported every 300 s with: ssh -F {head.config} slurm-head {script}" in text
