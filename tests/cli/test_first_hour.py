"""What a new user meets first: report periods as months and days (month to date by default), job and GPU-model
rows a person can read, the demo's database found from its hint, and user errors as one line without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from typer.testing import CliRunner

from finops.analysis.report import cost_report
from finops.analysis.report_format import report_dicts
from finops.cli import app
from finops.cli.base import user_error_message
from finops.db.engine import make_engine, session_factory, upgrade
from finops.db.models import Gpu, Job
from finops.errors import FinopsError
from finops.pricing.catalog import load_catalog
from finops.timeutil import month_start, next_month_start, period_bound, utc_now
from tests.support.servers import free_port
from tests.support.two_clusters import UUID_B, seed_two_clusters


@pytest.mark.parametrize(
    ("text", "end", "expected"),
    [
        ("2026-11", False, datetime(2026, 11, 1, tzinfo=UTC)),
        ("2026-11", True, datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12", True, datetime(2027, 1, 1, tzinfo=UTC)),
        ("2026-11-24", False, datetime(2026, 11, 24, tzinfo=UTC)),
        ("2026-11-30", True, datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-11-24T10:30:00", True, datetime(2026, 11, 24, 10, 30, tzinfo=UTC)),
        ("2026-11-24T10:30:00+01:00", False, datetime(2026, 11, 24, 9, 30, tzinfo=UTC)),
    ],
)
def test_a_month_or_a_day_is_a_whole_period_bound(text: str, end: bool, expected: datetime) -> None:
    assert period_bound(text, end=end) == expected


@pytest.mark.parametrize("text", ["2026-13", "2026-1", "november", "2026-11-31", ""])
def test_a_bad_period_bound_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        period_bound(text, end=False)


def _words(output: str) -> str:
    """Click's boxed error text as one line of words."""
    return " ".join(output.replace("│", " ").split())


def _json(result_output: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(result_output)
    for row in rows:
        row.pop("ledger_hours_pending")
        assert row.pop("ledger_stale") is None
    return rows


def test_report_periods_default_to_month_to_date_and_take_months(database_url: str) -> None:
    upgrade(make_engine(database_url))
    t0 = seed_two_clusters(database_url)
    runner, env = CliRunner(), {"FINOPS_DATABASE_URL": database_url}
    before = utc_now()
    default = runner.invoke(app, ["report", "--format", "json"], env=env)
    after = utc_now()
    assert default.exit_code == 0, default.output
    with session_factory(make_engine(database_url))() as session:
        # The default period ends "now": the ledger hours started before the call, or before its end, are in it.
        candidates = [report_dicts(cost_report(session, month_start(before), end)) for end in (before, after)]
        assert _json(default.stdout) in candidates
        month = runner.invoke(
            app, ["report", "--start", f"{t0:%Y-%m}", "--end", f"{t0:%Y-%m}", "--format", "json"], env=env
        )
        assert month.exit_code == 0, month.output
        whole_month = report_dicts(cost_report(session, month_start(t0), next_month_start(t0)))
        assert whole_month and _json(month.stdout) == whole_month
        day = runner.invoke(
            app, ["report", "--start", f"{t0:%Y-%m-%d}", "--end", f"{t0:%Y-%m-%d}", "--format", "json"], env=env
        )
        first = t0.replace(hour=0)
        assert _json(day.stdout) == report_dicts(cost_report(session, first, first + timedelta(days=1)))
    backwards = runner.invoke(app, ["report", "--start", "2026-12", "--end", "2026-11"], env=env)
    assert backwards.exit_code == 2 and "must be after --start (2026-12-01 00:00:00 UTC)" in _words(backwards.output)
    garbled = runner.invoke(app, ["report", "--start", "last week"], env=env)
    assert garbled.exit_code == 2 and "neither a month (2026-11), a day (2026-11-24) nor an ISO 8601" in _words(
        garbled.output
    )
    idle = runner.invoke(app, ["idle", "list", "--start", f"{t0:%Y-%m}", "--format", "json"], env=env)
    assert idle.exit_code == 0 and json.loads(idle.stdout), idle.output


def test_report_by_job_names_the_job_its_team_user_times_and_gpus(database_url: str) -> None:
    upgrade(make_engine(database_url))
    t0 = seed_two_clusters(database_url)
    env = {"FINOPS_DATABASE_URL": database_url}
    period = [
        "--start",
        f"{t0 - timedelta(hours=1):%Y-%m-%dT%H:%M}",
        "--end",
        f"{t0 + timedelta(hours=3):%Y-%m-%dT%H:%M}",
    ]
    result = CliRunner().invoke(app, ["report", *period, "--by", "job", "--format", "json"], env=env)
    assert result.exit_code == 0, result.output
    rows = {row["job"]: row for row in _json(result.stdout)}
    with session_factory(make_engine(database_url))() as session:
        jobs = session.scalars(select(Job)).all()
    assert {job.job_id for job in jobs} <= set(rows)
    for job in jobs:
        row = rows[job.job_id]
        assert (row["name"], row["user"], row["gpus"]) == (job.name, job.user, job.gpus)
        assert row["start"] == (job.start.isoformat() if job.start else None)
        assert row["end"] == (job.end.isoformat() if job.end else None)
        assert row["state"] == job.state
    assert rows["__unallocated__"]["name"] is None and rows["__unallocated__"]["team"] == "__unallocated__"
    table = CliRunner().invoke(app, ["report", *period, "--by", "job"], env=env).stdout
    header = table.splitlines()[1].split()
    assert header[:10] == ["job", "name", "team", "user", "start", "(UTC)", "end", "(UTC)", "state", "GPUs"]
    running = [line for line in table.splitlines() if " running " in line]
    assert len(running) == sum(job.end is None for job in jobs)


def test_report_by_gpu_model_has_one_row_per_catalogue_model(database_url: str) -> None:
    """One H100 reported by NVML's product name and one by its Slurm GRES type are one catalogue row; a name the
    catalogue does not know keeps its own row, so nothing is dropped."""
    upgrade(make_engine(database_url))
    t0 = seed_two_clusters(database_url)
    sessions = session_factory(make_engine(database_url))
    period = (t0, t0 + timedelta(hours=2))
    catalog = load_catalog()
    with sessions.begin() as session:
        session.execute(update(Gpu).where(Gpu.uuid == UUID_B).values(model="h100"))
    with sessions() as session:
        assert session.scalar(select(func.count(func.distinct(Gpu.model)))) == 2
        by_model = cost_report(session, *period, "gpu_model", catalog=catalog)
        by_node = cost_report(session, *period, "node")
    assert [row.key for row in by_model] == ["H100-SXM-80GB"]
    assert by_model[0].allocated_gpu_seconds == sum(row.allocated_gpu_seconds for row in by_node)
    assert by_model[0].allocated_cost == sum(row.allocated_cost for row in by_node)
    with sessions.begin() as session:
        session.execute(update(Gpu).where(Gpu.uuid == UUID_B).values(model="Acme Tensor 9000"))
    with sessions() as session:
        keys = sorted(row.key for row in cost_report(session, *period, "gpu_model", catalog=catalog))
    assert keys == ["Acme Tensor 9000", "H100-SXM-80GB"]
    with sessions() as session, pytest.raises(ValueError, match="needs the price catalog"):
        cost_report(session, *period, "gpu_model")
    result = CliRunner().invoke(
        app, ["report", "--start", t0.isoformat(), "--by", "gpu_model"], env={"FINOPS_DATABASE_URL": database_url}
    )
    assert result.exit_code == 0 and "\nH100-SXM-80GB " in result.stdout and "\nAcme Tensor 9000 " in result.stdout


def test_the_unmigrated_default_database_points_at_the_demos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FINOPS_DATABASE_URL", raising=False)
    monkeypatch.setenv("FINOPS_DATA_DIR", str(tmp_path))
    without = CliRunner().invoke(app, ["budget", "status"])
    assert without.exit_code == 2 and "run `gpu-finops db upgrade`" in without.output and "demo" not in without.output
    upgrade(make_engine(f"sqlite:///{tmp_path / 'demo.sqlite'}"))
    result = CliRunner().invoke(app, ["budget", "status"])
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    export = f"export FINOPS_DATABASE_URL=sqlite:///{(tmp_path / 'demo.sqlite').resolve()}"
    assert line.endswith(f"; or, for the demo's data: {export}")
    monkeypatch.setenv("FINOPS_DATABASE_URL", export.split("=", 1)[1])
    assert CliRunner().invoke(app, ["budget", "status"]).exit_code == 0


def test_user_errors_are_one_line_without_a_traceback(tmp_path: Path) -> None:
    unreachable = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing"
    for env, args, expected in [
        ({"FINOPS_DATABASE_URL": unreachable}, ["budget", "status"], "error: database: connection failed: "),
        ({"FINOPS_DATA_DIR": str(tmp_path)}, ["import", "sacct", str(tmp_path / "absent.txt")], "error: "),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "finops.cli", *args], capture_output=True, text=True, timeout=120,
            env={"PATH": "/usr/bin:/bin", "FINOPS_DATA_DIR": str(tmp_path), **env},
        )  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith(expected), done.stderr
    assert (
        user_error_message(FileNotFoundError(2, "No such file or directory", "/x/y"))
        == "/x/y: No such file or directory"
    )
    assert user_error_message(FinopsError("refused")) == "refused"
    assert user_error_message(KeyError("a bug")) is None


NO_DASHBOARD_EXTRA = textwrap.dedent(
    """
    import importlib.util, sys

    real = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name in {"streamlit", "altair", "pandas"} else real(name, *a)
    from finops.cli import app

    sys.argv = ["gpu-finops", *sys.argv[1:]]
    app()
    """
)
"""The service extra installed, the dashboard extra's packages not found; then ``gpu-finops ARGS``."""


@pytest.mark.parametrize("args", [["demo"], ["dashboard"]])
def test_the_dashboard_commands_name_their_extra(args: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_DASHBOARD_EXTRA, *args], capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "FINOPS_DATA_DIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: gpu-finops {args[0]} needs the dashboard extra (streamlit, altair, pandas missing): "
        "pip install 'gpu-finops[dashboard]'"
    ]


def test_one_shot_commands_print_their_line_and_log_only_warnings(tmp_path: Path) -> None:
    """``gpu-finops rollup`` says what it did once, on stdout; its INFO log line appears with ``--verbose`` only."""
    url = f"sqlite:///{tmp_path / 'finops.sqlite'}"
    upgrade(make_engine(url))
    env = {"PATH": "/usr/bin:/bin", "FINOPS_DATA_DIR": str(tmp_path), "FINOPS_DATABASE_URL": url}
    for verbose in ([], ["--verbose"]):
        done = subprocess.run(
            [sys.executable, "-m", "finops.cli", *verbose, "rollup"], capture_output=True, text=True, env=env,
            timeout=120, check=True,
        )  # fmt: skip
        assert done.stdout.startswith("rollup: ") and len(done.stdout.splitlines()) == 1, done.stdout
        logged = [line for line in done.stderr.splitlines() if " INFO finops.service.scheduler: rollup: " in line]
        assert len(logged) == (1 if verbose else 0), done.stderr


def test_a_reader_that_goes_away_stops_the_command_quietly(tmp_path: Path) -> None:
    """``gpu-finops alerts list | head -0``: the pipe closes before the command writes; no traceback, no error line."""
    url = f"sqlite:///{tmp_path / 'finops.sqlite'}"
    upgrade(make_engine(url))
    env = {"PATH": "/usr/bin:/bin", "FINOPS_DATA_DIR": str(tmp_path), "FINOPS_DATABASE_URL": url}
    process = subprocess.Popen(
        [sys.executable, "-m", "finops.cli", "alerts", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the child has even started Python: its first write meets a closed pipe
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1
    assert stderr == ""
