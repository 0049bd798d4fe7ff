"""A sacct file read in the wrong time zone: lines with a time after the import's are refused, named with the
``--timezone`` fix, and the rest is imported (both databases, through the command line)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from sqlalchemy import select
from typer.testing import CliRunner

from finops.cli import app
from finops.db.models import Job
from finops.jobs.slurm import parse_sacct

BERLIN = ZoneInfo("Europe/Berlin")


def _line(job: int, start: datetime, end: datetime | None, tz: ZoneInfo) -> str:
    begin = start.astimezone(tz).strftime("%Y-%m-%dT%H:%M:%S")
    stop = "Unknown" if end is None else end.astimezone(tz).strftime("%Y-%m-%dT%H:%M:%S")
    state = "RUNNING" if end is None else "COMPLETED"
    return f"{job}|{job}|orion|gpu|nlp|bob|{begin}|{begin}|{stop}|00:10:00|{state}|gres/gpu=1|gpu-01|train"


def test_times_after_the_import_are_refused_with_the_timezone_fix(
    sessions, engine, monkeypatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    now = datetime.now(UTC).replace(microsecond=0)
    lines = [  # as sacct prints them on a Berlin host (one or two hours ahead of UTC)
        _line(1, now - timedelta(days=2), now - timedelta(days=2) + timedelta(minutes=10), BERLIN),
        _line(2, now - timedelta(minutes=150), now - timedelta(minutes=10), BERLIN),
        _line(3, now - timedelta(minutes=5), None, BERLIN),
    ]
    file = tmp_path / "sacct.txt"
    file.write_text("\n".join(lines) + "\n")
    runner = CliRunner()
    wrong = runner.invoke(app, ["import", "sacct", str(file), "--no-rollup"])
    assert wrong.exit_code == 1
    assert "imported 1 GPU jobs; 0 without GPUs; 2 bad lines" in wrong.stdout
    refused = [line for line in wrong.stderr.splitlines() if "--timezone" in line]
    assert [line.split(": ")[0] for line in refused] == [f"skipped {file}:2", f"skipped {file}:3"]
    assert "field End" in refused[0] and "field Submit" in refused[1] and "h after the import's time" in refused[0]
    right = runner.invoke(app, ["import", "sacct", str(file), "--timezone", "Europe/Berlin", "--no-rollup"])
    assert right.exit_code == 0, right.output
    with sessions() as session:
        starts = {raw: start for raw, start in session.execute(select(Job.job_id_raw, Job.start))}
    assert starts["2"] == now - timedelta(minutes=150) and starts["3"] == now - timedelta(minutes=5)


def test_a_few_minutes_of_clock_skew_pass() -> None:
    now = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
    skewed = _line(1, now - timedelta(minutes=30), now + timedelta(minutes=4), ZoneInfo("UTC"))
    late = _line(2, now - timedelta(minutes=30), now + timedelta(minutes=6), ZoneInfo("UTC"))
    parsed = parse_sacct([skewed, late], source="s", not_after=now)
    assert [job.job_id_raw for job in parsed.jobs] == ["1"]
    assert parsed.errors[0].message.startswith("s:2: field End: 2026-11-03T10:06:00 read in UTC is 0.1 h after")
