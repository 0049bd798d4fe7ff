"""Hardware activity from the collector's wire to every report (tests/support/activity_scenario.py): readings with
and without profiling fields POSTed to the real ingest API over a socket, the rollup, then the cost report by job,
team and GPU model (JSON and CSV), REST ``/costs`` and the FOCUS export (CSV and Parquet) give the hand-computed
means, the SM-active cost to the micro-unit, the profiled share of a half-profiled hour, and null (never 0) for what
was not profiled."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from collector.shipper import Shipper
from finops.cli import app
from finops.db.models import UNALLOCATED_TEAM
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account
from finops.pricing.catalog import PricingModel, load_catalog
from finops.web.app import create_app
from finops.web.cost_schema import CostsOut
from tests.support import activity_scenario as slice_
from tests.support import scenario
from tests.support.servers import running

INGEST = "activity-ingest-token"
API = {"Authorization": "Bearer activity-api-token"}
ACTIVITY = ("sm_active_ratio", "tensor_active_ratio", "dram_active_ratio", "profiled_share")
CENT = Decimal("0.01")


@pytest.fixture
def rolled_up(
    sessions: sessionmaker[Session], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, datetime, Decimal]]:
    """The slice shipped to the service by the collector's shipper, its jobs imported, ``gpu-finops rollup`` run;
    yields (the service's base URL, T, the on-demand rate)."""
    t0 = scenario.start_hour()
    monkeypatch.setenv("FINOPS_DATABASE_URL", database_url)
    with running(create_app(sessions, INGEST, api_token=API["Authorization"].split()[1])) as url:
        readings = slice_.samples(t0)
        assert Shipper(url, INGEST, slice_.NODE).ship(readings) == len(readings) == 480
        with sessions.begin() as session:
            map_account(session, "acct-v", "vision", actor="system:test")
            map_account(session, "acct-n", "nlp", actor="system:test")
            assert import_sacct(session, slice_.sacct_lines(t0), source="activity").errors == []
        result = CliRunner().invoke(app, ["rollup"])
        assert result.exit_code == 0, result.output
        yield url, t0, load_catalog().rate(slice_.MODEL, PricingModel.ON_DEMAND, t0)


def _period(t0: datetime) -> list[str]:
    return ["--start", t0.isoformat(), "--end", (t0 + timedelta(hours=2)).isoformat()]


def _report(t0: datetime, by: str, output_format: str) -> str:
    result = CliRunner().invoke(app, ["report", *_period(t0), "--by", by, "--format", output_format])
    assert result.exit_code == 0, result.output
    return result.stdout


def _assert_activity(rows: dict[str, dict[str, Any]], rate: Decimal) -> None:
    """``rows`` (group → a report row, JSON or CSV-parsed) hold the hand-computed activity of their group."""
    for key, row in rows.items():
        for field, expected in slice_.EXPECTED[key].items():
            value = row[field]
            if expected is None:
                assert value is None, (key, field, value)  # not measured: null, never 0
            else:
                assert value == pytest.approx(expected, abs=1e-6), (key, field)
    costs = slice_.sm_active_costs(rate)
    for job, exact in costs.items():
        if job in rows:
            expected_cost = None if exact is None else str(exact.quantize(CENT))
            assert rows[job]["sm_active_cost"] == expected_cost, job
    if "vision" in rows:
        vision = costs["601"] + costs["603"]  # type: ignore[operator]
        assert rows["vision"]["sm_active_cost"] == str(vision.quantize(CENT))
        assert rows["nlp"]["sm_active_cost"] is None and rows[UNALLOCATED_TEAM]["sm_active_cost"] is None


def _csv_rows(text: str, key: str) -> dict[str, dict[str, Any]]:
    """CSV rows by ``key``, the activity fields typed back (an empty field is null)."""
    rows = {}
    for row in csv.DictReader(io.StringIO(text)):
        typed: dict[str, Any] = dict(row)
        for field in ACTIVITY:
            typed[field] = float(row[field]) if row[field] else None
        typed["sm_active_cost"] = row["sm_active_cost"] or None
        rows[row[key]] = typed
    return rows


GROUPS = {"job": {"601", "602", "603", UNALLOCATED_TEAM}, "team": {"vision", "nlp", UNALLOCATED_TEAM}}


def test_activity_in_reports_rest_and_focus(rolled_up: tuple[str, datetime, Decimal], tmp_path: Path) -> None:
    url, t0, rate = rolled_up
    for by, key in (("job", "job"), ("team", "team"), ("gpu_model", "gpu_model")):
        reported = {row[key]: row for row in json.loads(_report(t0, by, "json"))}
        assert set(reported) == GROUPS.get(by, {"H100-SXM-80GB"})
        _assert_activity(reported, rate)
        _assert_activity(_csv_rows(_report(t0, by, "csv"), key), rate)
        response = httpx.get(
            f"{url}/api/v1/costs",
            params={"start": t0.isoformat(), "end": (t0 + timedelta(hours=2)).isoformat(), "group_by": by},
            headers=API,
        )
        assert response.status_code == 200, response.text
        CostsOut.model_validate(response.json())
        rest = {row[key]: row for row in response.json()["rows"]}
        assert rest == {
            k: {f: v for f, v in row.items() if f not in ("ledger_hours_pending", "ledger_stale")}
            for k, row in reported.items()
        }
        csv_response = httpx.get(
            f"{url}/api/v1/costs",
            params={"start": t0.isoformat(), "end": (t0 + timedelta(hours=2)).isoformat(), "group_by": by,
                    "format": "csv"},
            headers=API,
        )  # fmt: skip
        _assert_activity(_csv_rows(csv_response.text, key), rate)

    table = _report(t0, "job", "table")
    line = next(line for line in table.splitlines() if line.startswith("602 "))
    assert line.count("not measured") == 4 and line.endswith("0.0%")  # SM, tensor, DRAM, cost; profiled 0 %
    assert next(line for line in table.splitlines() if line.startswith("603 ")).endswith("50.0%")

    _assert_focus(t0, rate, tmp_path)


def _assert_focus(t0: datetime, rate: Decimal, tmp_path: Path) -> None:
    """The FOCUS export, CSV and Parquet: each ledger row's activity, SM-active cost to the micro-unit, nulls."""
    for name in ("activity.csv", "activity.parquet"):
        out = tmp_path / name
        result = CliRunner().invoke(app, ["export", "focus", *_period(t0), "-o", str(out)])
        assert result.exit_code == 0, result.output
        if name.endswith(".csv"):
            with out.open(newline="") as handle:
                rows = [
                    {k: (v or None) for k, v in row.items()}  # an empty CSV field is null
                    for row in csv.DictReader(handle)
                ]
        else:
            rows = [
                {k: (None if v is None else str(v)) for k, v in row.items()} for row in pq.read_table(out).to_pylist()
            ]
        by_key = {(row["x_JobId"], row["ChargePeriodStart"][:13].replace(" ", "T")): row for row in rows}
        hour = [f"{t0 + timedelta(hours=h):%Y-%m-%dT%H}" for h in (0, 1)]
        one_hour = slice_.sm_active_costs(rate)["603"]
        for (job, at), (profiled, sm, tensor, dram) in {
            ("601", hour[0]): ("3600", 0.75, 0.5, 0.125),
            ("601", hour[1]): ("3600", 0.25, 0.5, 0.375),
            ("602", hour[0]): ("0", None, None, None),
            ("603", hour[0]): ("1800", 0.625, 0.25, None),
        }.items():
            row = by_key[job, at]
            assert row["x_ProfiledGpuSeconds"] == profiled, (name, job, at)
            for column, expected in (
                ("x_SmActiveRatio", sm),
                ("x_TensorActiveRatio", tensor),
                ("x_DramActiveRatio", dram),
            ):
                assert (None if row[column] is None else float(row[column])) == expected, (name, job, at, column)
            cost = row["x_SmActiveCost"]
            if sm is None:
                assert cost is None, (name, job)
            else:  # allocated × SM activity, to the micro-unit
                assert Decimal(cost) == (Decimal(row["BilledCost"]) * Decimal(repr(sm))).quantize(Decimal("0.000001"))
        assert Decimal(by_key["603", hour[0]]["x_SmActiveCost"]) == one_hour
        unheld = [row for row in rows if row["x_JobId"] is None]
        assert len(unheld) == 3 and all(
            row["x_SmActiveRatio"] is None and row["x_SmActiveCost"] is None for row in unheld
        )
        assert all(row["x_ProfiledGpuSeconds"] == "0" for row in unheld)
