"""The scheduled sacct import: sacct's command line, the watermark, failures, and the command and settings."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from finops.db.models import Job, Watermark
from finops.jobs.slurm import SACCT_FIELDS
from finops.jobs.slurm_import import SACCT_STATES, SacctError, ScheduledSacct, run_sacct, sacct_argv
from finops.settings.combined import Settings

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
FORMAT = (
    "--format=JobID,JobIDRaw,Cluster,Partition,Account,User,Submit,Start,End,Elapsed,State,AllocTRES,NodeList,JobName"
)

FAKE_SACCT = """\
import json, os, sys, time
with open(os.environ["FAKE_SACCT_LOG"], "a") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "tz": os.environ.get("TZ"),
                          "time_format": os.environ.get("SLURM_TIME_FORMAT")}) + "\\n")
time.sleep(float(os.environ.get("FAKE_SACCT_SLEEP", "0")))
with open(os.environ["FAKE_SACCT_OUTPUT"]) as output:
    sys.stdout.write(output.read())
sys.stderr.write(os.environ.get("FAKE_SACCT_STDERR", ""))
sys.exit(int(os.environ.get("FAKE_SACCT_EXIT", "0")))
"""


class FakeSacct:
    """A ``sacct`` script that prints ``output`` lines, records its arguments, and exits as told."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = tmp_path / "sacct"
        self.path.write_text(f"#!{sys.executable}\n{FAKE_SACCT}")
        self.path.chmod(0o755)
        self.log = tmp_path / "sacct-calls.jsonl"
        self.output = tmp_path / "sacct-output.txt"
        self.output.write_text("")
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("FAKE_SACCT_LOG", str(self.log))
        monkeypatch.setenv("FAKE_SACCT_OUTPUT", str(self.output))

    def prints(self, *lines: str) -> None:
        self.output.write_text("".join(f"{line}\n" for line in lines))

    def fails(self, status: int, stderr: str) -> None:
        self.monkeypatch.setenv("FAKE_SACCT_EXIT", str(status))
        self.monkeypatch.setenv("FAKE_SACCT_STDERR", stderr)

    def calls(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def fake_sacct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSacct:
    return FakeSacct(tmp_path, monkeypatch)


def _line(job: int, start: str, end: str, state: str, node: str = "gpu-h-01") -> str:
    return (
        f"{job}|{job}|orion|gpu|nlp|bob|{start}|{start}|{end}|01:00:00|{state}|gres/gpu:h100=2,gres/gpu=2|{node}|train"
    )


def _watermark(sessions, name: str = "sacct:orion") -> datetime | None:  # type: ignore[no-untyped-def]
    with sessions() as session:
        mark = session.get(Watermark, name)
        return None if mark is None else mark.value


def test_the_sacct_command_line() -> None:
    assert f"--format={','.join(SACCT_FIELDS)}" == FORMAT
    assert SACCT_STATES == ("RUNNING",)
    start, end = datetime(2026, 1, 5, 10, 50, tzinfo=UTC), NOW
    assert sacct_argv("ssh slurm-head /usr/bin/sacct", start, end, "orion") == [
        "ssh", "slurm-head", "env", "TZ=UTC", "SLURM_TIME_FORMAT=standard", "/usr/bin/sacct",
        "--allusers", "--allocations", "--duplicates", "--parsable2", "--noheader", FORMAT,
        "--starttime=2026-01-05T10:50:00", "--endtime=2026-01-05T12:00:00", "--state=RUNNING", "--clusters=orion",
    ]  # fmt: skip


def test_runs_move_the_watermark_and_reread_running_jobs(sessions, fake_sacct: FakeSacct) -> None:  # type: ignore[no-untyped-def]
    fake_sacct.prints(_line(41, "2026-01-05T09:00:00", "Unknown", "RUNNING"), "41|41|orion")
    first = run_sacct(sessions, command=str(fake_sacct.path), cluster="orion", now=NOW + timedelta(microseconds=5))
    assert first.result.jobs == 1 and first.result.errors[0].line_number == 2  # a bad line is skipped
    fake_sacct.prints(_line(41, "2026-01-05T09:00:00", "2026-01-05T12:20:00", "COMPLETED"))
    second = run_sacct(
        sessions, command=str(fake_sacct.path), cluster="orion", now=NOW + timedelta(minutes=30),
        overlap=timedelta(minutes=10),
    )  # fmt: skip
    calls = fake_sacct.calls()
    assert [call["argv"] for call in calls] == [
        ["--allusers", "--allocations", "--duplicates", "--parsable2", "--noheader", FORMAT,
         "--starttime=2026-01-04T12:00:00", "--endtime=2026-01-05T12:00:00", "--state=RUNNING", "--clusters=orion"],
        ["--allusers", "--allocations", "--duplicates", "--parsable2", "--noheader", FORMAT,
         "--starttime=2026-01-05T11:50:00", "--endtime=2026-01-05T12:30:00", "--state=RUNNING", "--clusters=orion"],
    ]  # fmt: skip
    assert {(call["tz"], call["time_format"]) for call in calls} == {("UTC", "standard")}
    assert (first.start, first.end) == (NOW - timedelta(days=1), NOW)
    assert (second.start, second.end) == (NOW - timedelta(minutes=10), NOW + timedelta(minutes=30))
    assert _watermark(sessions) == NOW + timedelta(minutes=30)
    with sessions() as session:
        job = session.scalars(select(Job)).one()
    # The second run read the job again and found it ended; sacct's UTC times are read as UTC.
    assert (job.state, job.start, job.end) == (
        "COMPLETED",
        datetime(2026, 1, 5, 9, tzinfo=UTC),
        NOW + timedelta(minutes=20),
    )


def test_a_run_logs_at_info_only_when_sacct_had_something(  # type: ignore[no-untyped-def]
    sessions, fake_sacct: FakeSacct, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="finops.jobs.slurm_import")
    run_sacct(sessions, command=str(fake_sacct.path), cluster="orion", now=NOW)
    assert [r.levelno for r in caplog.records if "GPU jobs imported" in r.getMessage()] == [logging.DEBUG]
    caplog.clear()
    fake_sacct.prints(_line(42, "2026-01-05T09:00:00", "Unknown", "RUNNING"))
    run_sacct(sessions, command=str(fake_sacct.path), cluster="orion", now=NOW + timedelta(minutes=5))
    (record,) = [r for r in caplog.records if "GPU jobs imported" in r.getMessage()]
    assert record.levelno == logging.INFO and ": 1 GPU jobs imported" in record.getMessage()


def test_a_failing_sacct_is_logged_and_leaves_the_watermark(  # type: ignore[no-untyped-def]
    sessions, fake_sacct: FakeSacct, caplog: pytest.LogCaptureFixture
) -> None:
    fake_sacct.prints(_line(42, "2026-01-05T09:00:00", "Unknown", "RUNNING"))
    run_sacct(sessions, command=str(fake_sacct.path), cluster="orion", now=NOW)
    fake_sacct.prints(_line(43, "2026-01-05T11:00:00", "Unknown", "RUNNING"))
    fake_sacct.fails(1, "sacct: error: Problem talking to the database: Connection refused\n")
    with caplog.at_level(logging.ERROR, logger="finops.jobs.slurm_import"), pytest.raises(SacctError) as raised:
        run_sacct(sessions, command=str(fake_sacct.path), cluster="orion", now=NOW + timedelta(minutes=5))
    assert "exited with status 1: sacct: error: Problem talking to the database: Connection refused" in str(
        raised.value
    )
    assert "Problem talking to the database" in caplog.text and "watermark not moved" in caplog.text
    assert _watermark(sessions) == NOW
    with sessions() as session:
        assert [job.job_id for job in session.scalars(select(Job))] == ["42"]  # nothing of the failed run


def test_a_sacct_that_hangs_times_out_and_leaves_the_watermark(  # type: ignore[no-untyped-def]
    sessions, fake_sacct: FakeSacct, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SACCT_SLEEP", "30")
    with pytest.raises(SacctError, match=r"timed out after 0\.5 s"):
        run_sacct(sessions, command=str(fake_sacct.path), cluster="orion", now=NOW, timeout_seconds=0.5)
    assert _watermark(sessions) is None


def test_a_missing_sacct_is_an_error(sessions, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SacctError, match="could not be run"):
        run_sacct(sessions, command=str(tmp_path / "no-sacct"), now=NOW)
    assert _watermark(sessions, "sacct:default") is None


def test_the_default_cluster_is_not_passed_to_sacct(sessions, fake_sacct: FakeSacct) -> None:  # type: ignore[no-untyped-def]
    run_sacct(sessions, command=str(fake_sacct.path), now=NOW)
    [call] = fake_sacct.calls()
    assert not any(str(arg).startswith("--clusters") for arg in call["argv"])  # type: ignore[attr-defined]
    assert _watermark(sessions, "sacct:default") == NOW


def test_the_scheduled_run_swallows_failures(sessions, fake_sacct: FakeSacct) -> None:  # type: ignore[no-untyped-def]
    scheduled = ScheduledSacct(str(fake_sacct.path), "orion", 300, 600, 3600, 30.0)
    fake_sacct.prints(_line(44, "2026-01-05T09:00:00", "Unknown", "RUNNING"))
    done = scheduled.run(sessions)
    assert done is not None and done.result.jobs == 1
    fake_sacct.fails(2, "boom")
    assert scheduled.run(sessions) is None
    assert _watermark(sessions) == done.end


def test_settings_schedule_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from finops.cli.serve import scheduled_sacct

    caplog.set_level(logging.INFO, logger="finops.cli.serve")
    monkeypatch.delenv("FINOPS_SACCT_SCHEDULE_SECONDS")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sacct on it
    assert scheduled_sacct(Settings()) is None
    (line,) = caplog.messages
    assert "not imported on a schedule: sacct is not on the PATH and FINOPS_SACCT_COMMAND is not set" in line
    caplog.clear()
    (tmp_path / "sacct").write_text("#!/bin/sh\n")
    (tmp_path / "sacct").chmod(0o755)
    assert scheduled_sacct(Settings()) == ScheduledSacct("sacct", "default", 300, 600, 86400, 300.0)
    assert caplog.messages == ["Slurm jobs imported every 300 s with: sacct"]
    (tmp_path / "sacct").unlink()
    caplog.clear()
    monkeypatch.setenv("FINOPS_SACCT_COMMAND", "ssh -F /etc/gpu-finops/sacct-ssh/config slurm-head sacct")
    assert scheduled_sacct(Settings()) is not None  # set: scheduled, and told that ssh is missing here
    assert caplog.messages[0] == (
        "FINOPS_SACCT_COMMAND: ssh is not on the PATH; every scheduled sacct import will fail"
    )
    caplog.clear()
    assert scheduled_sacct(Settings(sacct_schedule_seconds=0)) is None
    assert caplog.messages == ["Slurm jobs are not imported on a schedule (FINOPS_SACCT_SCHEDULE_SECONDS=0)"]
    settings = Settings(sacct_schedule_seconds=120, sacct_command="/opt/slurm/bin/sacct", sacct_cluster="orion")
    assert scheduled_sacct(settings) == ScheduledSacct("/opt/slurm/bin/sacct", "orion", 120, 600, 86400, 300.0)
    for command in ("", "  ", "sacct 'unclosed"):
        with pytest.raises(ValueError, match="sacct_command"):
            Settings(sacct_command=command)


def test_import_sacct_run_command(engine, database_url: str, fake_sacct: FakeSacct) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "FINOPS_DATABASE_URL": database_url, "FINOPS_SACCT_COMMAND": str(fake_sacct.path)}
    command = [sys.executable, "-m", "finops.cli", "import", "sacct", "--run", "--cluster", "orion"]
    fake_sacct.prints(_line(45, "2026-01-05T09:00:00", "Unknown", "RUNNING"))
    ok = subprocess.run(command, capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "imported 1 GPU jobs; 0 without GPUs; 0 bad lines; watermark sacct:orion at " in ok.stdout
    failing = subprocess.run(command, capture_output=True, text=True, env={**env, "FAKE_SACCT_EXIT": "1",
                             "FAKE_SACCT_STDERR": "sacct: error: Invalid user for SlurmDBD"})  # fmt: skip
    assert failing.returncode == 1
    assert "Invalid user for SlurmDBD" in failing.stderr and "watermark sacct:orion not moved" in failing.stderr
    neither = subprocess.run(command[:5], capture_output=True, text=True, env=env)
    assert neither.returncode == 2 and "give FILE" in neither.stderr


def test_one_cluster_keeps_one_watermark_however_it_is_run(sessions, fake_sacct: FakeSacct) -> None:  # type: ignore[no-untyped-def]
    first = run_sacct(sessions, command=str(fake_sacct.path), now=NOW)  # nothing yet: the cluster's name is unknown
    assert first.watermark == "sacct:default" and _watermark(sessions, "sacct:default") == NOW
    fake_sacct.prints(_line(46, "2026-01-05T11:00:00", "Unknown", "RUNNING"))
    later = NOW + timedelta(minutes=5)
    unnamed = run_sacct(sessions, command=str(fake_sacct.path), now=later, overlap=timedelta(minutes=1))
    assert unnamed.start == NOW - timedelta(minutes=1)
    assert unnamed.watermark == "sacct:orion", "sacct's Cluster field names the local cluster"
    with sessions() as session:
        names = list(session.scalars(select(Watermark.name)))
    assert names == ["sacct:orion"] and _watermark(sessions) == later
    named = run_sacct(
        sessions, command=str(fake_sacct.path), cluster="orion", now=later + timedelta(minutes=5),
        overlap=timedelta(minutes=1),
    )  # fmt: skip
    assert named.start == later - timedelta(minutes=1), "the named run continues the unnamed runs' watermark"
    again = run_sacct(sessions, command=str(fake_sacct.path), now=later + timedelta(minutes=10))
    assert again.start == named.end - timedelta(minutes=10) and again.watermark == "sacct:orion"
    with sessions() as session:
        assert list(session.scalars(select(Watermark.name))) == ["sacct:orion"]


def test_the_migration_merges_a_default_watermark_into_the_cluster(database_url: str) -> None:
    from sqlalchemy import text

    from finops.db.engine import make_engine, upgrade

    engine = make_engine(database_url)
    upgrade(engine, "0024")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO teams (name) VALUES ('t')"))
        connection.execute(
            text(
                "INSERT INTO jobs (scheduler, cluster, job_id, job_id_raw, user, account, partition, name, state, "
                "gpus, node_list, team_id) VALUES ('slurm', 'orion', '1', '1', 'u', 'a', 'p', 'n', 'COMPLETED', 1, "
                "'n1', 1)".replace(" user,", ' "user",').replace(" partition,", ' "partition",')
            )
        )
        connection.execute(
            text("INSERT INTO watermarks (name, value) VALUES ('sacct:default', 2000), ('sacct:orion', 1000)")
        )
    upgrade(engine)
    with engine.begin() as connection:
        assert connection.execute(text("SELECT name, value FROM watermarks")).all() == [("sacct:orion", 2000)]
    engine.dispose()
