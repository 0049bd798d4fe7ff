"""``gpu-finops report`` says when the ledger was built before the last scheduled job import, and names the command
that brings it up to date (on SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from finops.cli import app
from finops.db.hours import LEDGER_WATERMARK, stale_ledger
from finops.db.models import Watermark
from finops.jobs.slurm_import import run_sacct
from finops.timeutil import floor_hour, from_epoch, to_epoch, utc_now
from tests.jobs.test_sacct_run import FakeSacct


def _line(job: int, start: str) -> str:
    return f"{job}|{job}|orion|gpu|nlp|bob|{start}|{start}|Unknown|00:30:00|RUNNING|gres/gpu:h100=2|gpu-h-01|train"


def test_report_says_when_the_ledger_predates_the_last_import(  # type: ignore[no-untyped-def]
    cli_env: CliRunner, sessions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = utc_now().replace(microsecond=0)
    sacct = FakeSacct(tmp_path, monkeypatch)
    started = now - timedelta(minutes=30)
    sacct.prints(_line(77, f"{started:%Y-%m-%dT%H:%M:%S}"))
    run_sacct(sessions, command=str(sacct.path), cluster="orion", now=now)  # the scheduled import; no rollup yet

    def report(*args: str):  # type: ignore[no-untyped-def]
        start = f"{started - timedelta(hours=1):%Y-%m-%dT%H:%M:%S}"
        return cli_env.invoke(app, ["report", "--by", "job", "--start", start, *args])

    table = report()
    assert table.exit_code == 0, table.output
    first, *_ = table.stdout.splitlines()
    assert first.startswith("note: the ledger has not been built since the last job import (sacct:orion at ")
    assert first.endswith("run gpu-finops rollup to bring it up to date")

    assert cli_env.invoke(app, ["rollup"]).exit_code == 0
    built = report()
    assert "note: the ledger" not in built.output
    assert any(line.startswith("77 ") for line in built.stdout.splitlines()), built.stdout
    rows = orjson.loads(report("--format", "json").stdout)
    assert [row["ledger_stale"] for row in rows] == [None] * len(rows) and rows

    later = utc_now().replace(microsecond=0) + timedelta(seconds=5)  # the next scheduled run, after the rollup
    run_sacct(sessions, command=str(sacct.path), cluster="orion", now=later)
    stale = report()
    assert stale.stdout.startswith("note: the ledger was built up to ")
    assert f"before the last job import (sacct:orion at {later:%Y-%m-%d %H:%M:%S} UTC)" in stale.stdout
    assert any(line.startswith("77 ") for line in stale.stdout.splitlines()), "the numbers it has are still shown"
    as_json = report("--format", "json")
    assert "run gpu-finops rollup" in as_json.stderr
    (row,) = [row for row in orjson.loads(as_json.stdout) if row["job"] == "77"]
    assert row["ledger_stale"]["import"] == "sacct:orion" and row["ledger_stale"]["fix"] == "gpu-finops rollup"
    assert row["ledger_stale"]["imported_at"] == later.isoformat()
    by_reason = orjson.loads(report("--format", "json", "--by", "reason").stdout)
    assert by_reason["ledger_stale"]["import"] == "sacct:orion"


def test_a_period_before_the_hour_last_built_is_not_stale(sessions) -> None:  # type: ignore[no-untyped-def]
    # Half past the last whole hour, so that "a minute before now" lies after the hour whatever the clock says.
    hour = from_epoch(floor_hour(to_epoch(utc_now()))) - timedelta(hours=1)
    now = hour + timedelta(minutes=30)
    with sessions.begin() as session:
        session.add(Watermark(name=LEDGER_WATERMARK, value=now - timedelta(minutes=1)))
        session.add(Watermark(name="sacct:orion", value=now))
        session.add(Watermark(name="lease-test", value=now + timedelta(hours=1)))  # not an import
    with sessions() as session:
        assert stale_ledger(session, hour) is None, "last month's report: its hours' changes are marked dirty"
        found = stale_ledger(session, now)
        assert found is not None and (found.source, found.imported_at) == ("sacct:orion", now.replace(microsecond=0))
