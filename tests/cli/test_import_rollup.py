"""Commands that change what the ledger is built from roll it up before they return: ``import sacct`` leaves the
report current with no separate rollup; ``--no-rollup`` leaves the hours pending and ``report`` says so (both
databases)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import orjson
from typer.testing import CliRunner, Result

from finops.analysis.idle import IdlePolicy
from finops.analysis.report import cost_report
from finops.analysis.report_format import report_dicts
from finops.cli import app
from finops.ingest.readings import Ingestor
from finops.pricing.catalog import Pricing, PricingModel, load_catalog
from finops.service.scheduler import run_rollup
from tests.support import scenario


def _invoke(database_url: str, *args: str) -> Result:
    result = CliRunner().invoke(app, list(args), env={"FINOPS_DATABASE_URL": database_url})
    assert result.exit_code == 0, result.output
    return result


def _report(database_url: str, t0) -> tuple[dict[str, dict[str, object]], str]:  # type: ignore[no-untyped-def]
    period = ["--start", t0.isoformat(), "--end", (t0 + timedelta(hours=2)).isoformat()]
    result = _invoke(database_url, "report", *period, "--format", "json")
    return {row["team"]: row for row in orjson.loads(result.stdout)}, result.stderr


def test_imports_roll_up_unless_told_not_to(sessions, database_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t0 = scenario.start_hour()
    with sessions.begin() as session:
        Ingestor().store(session, scenario.batch(t0))
    run_rollup(sessions, Pricing(load_catalog(), PricingModel.ON_DEMAND), IdlePolicy())
    rows, note = _report(database_url, t0)
    assert set(rows) == {"__unallocated__"} and note == "", "readings only: all capacity unallocated, all current"

    log = tmp_path / "sacct.txt"
    log.write_text("\n".join(scenario.sacct_lines(t0)) + "\n")
    imported = _invoke(database_url, "import", "sacct", str(log)).stdout.splitlines()
    assert imported[0] == "imported 2 GPU jobs; 0 without GPUs; 0 bad lines"
    assert imported[1].startswith("rollup: ") and imported[1].endswith(" idle episodes") and len(imported) == 2
    rows, note = _report(database_url, t0)
    assert note == "" and {row["ledger_hours_pending"] for row in rows.values()} == {0}
    assert set(rows) == {"__unallocated__", "__unmapped__"}, "both jobs' accounts are unmapped yet"
    with sessions() as session:
        current = report_dicts(cost_report(session, t0, t0 + timedelta(hours=2)))
    assert [{**row, "ledger_hours_pending": 0, "ledger_stale": None} for row in current] == list(rows.values())

    mapped = _invoke(database_url, "team", "map", "acct-a", "alpha", "--no-rollup").stdout
    assert "rollup: skipped (--no-rollup)" in mapped
    rows, note = _report(database_url, t0)
    assert set(rows) == {"__unallocated__", "__unmapped__"}, "not rolled up: job 501 still bills __unmapped__"
    assert note.startswith("note: 2 ledger hours in this period are pending") and note.count("\n") == 1
    assert {row["ledger_hours_pending"] for row in rows.values()} == {2}

    assert _invoke(database_url, "rollup").stdout.startswith("rollup: ")
    rows, note = _report(database_url, t0)
    assert note == "" and rows["alpha"]["ledger_hours_pending"] == 0
    assert set(rows) == {"__unallocated__", "__unmapped__", "alpha"}
