"""``gpu-finops commitments``: JSON as ``GET /api/v1/commitments`` gives it, CSV and the table with the same figures,
the model left out with its fix, ``--model`` and ``--quantity``, and options out of bounds refused (both
databases). The data: the scenario slice with its GPU 1 of a model the catalogue does not price
(tests/support/unpriced.py), rolled up."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner, Result

from finops.cli import app
from finops.ledger.rollup_result import unpriced_fix
from finops.web.app import create_app
from tests.support import scenario, unpriced
from tests.support.servers import running

TOKEN = "commitments-token"
H100 = "H100-SXM-80GB"


@pytest.fixture
def command(sessions: sessionmaker[Session]) -> Callable[..., Result]:
    """``gpu-finops commitments ARGS…`` on the rolled-up slice."""
    t0 = scenario.start_hour()
    with sessions.begin() as session:
        unpriced.load_rolled_up(session, t0)
    url = sessions.kw["bind"].url.render_as_string(hide_password=False)

    def run(*args: str) -> Result:
        return CliRunner().invoke(app, ["commitments", *args], env={"FINOPS_DATABASE_URL": url})

    return run


def _same_hour(read: Callable[[], tuple[dict[str, Any], dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two reports read one after the other, again if an hour began between them (their windows then differ)."""
    for _ in range(3):
        first, second = read()
        if first["end"] == second["end"]:
            return first, second
    raise AssertionError("three hours began while reading two reports")


def test_json_is_the_rest_apis_and_csv_and_table_say_the_same(command, sessions) -> None:  # type: ignore[no-untyped-def]
    def both() -> tuple[dict[str, Any], dict[str, Any]]:
        listed = command("--days", "1", "--quantity", "1", "--format", "json")
        assert listed.exit_code == 0, listed.output
        with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as base:
            response = httpx.get(
                f"{base}/api/v1/commitments",
                params={"days": 1, "quantity": 1},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
        assert response.status_code == 200, response.text
        return orjson.loads(listed.stdout), response.json()

    report, rest = _same_hour(both)
    assert report == rest
    (h100,) = report["commitments"]
    assert (h100["model"], h100["gpu_names"], h100["what_if"]["quantity"]) == (H100, [scenario.MODEL], 1)
    assert h100["gpu_hours"] == 1.5, "GPU 0 held for 90 minutes (job 501)"
    assert report["not_analysed"] == [
        {
            "model": unpriced.UNPRICED_MODEL,
            "section": "commitment",
            "reason": "no price catalogue model covers this GPU name",
            "fix": unpriced_fix(unpriced.UNPRICED_MODEL),
        }
    ]

    rows = list(csv.DictReader(io.StringIO(command("--days", "1", "--quantity", "1", "--format", "csv").stdout)))
    assert [(row["section"], row["model"]) for row in rows] == [
        ("commitment", H100),
        ("commitment", unpriced.UNPRICED_MODEL),
    ]
    for column, value in (
        ("best_quantity", h100["best"]["quantity"]),
        ("best_saving_per_month", h100["best"]["saving_per_month"]),
        ("what_if_cost", h100["what_if"]["cost"]),
        ("on_demand_cost", h100["on_demand_cost"]),
    ):
        assert rows[0][column] == str(value), column
    assert rows[1]["fix"] == unpriced_fix(unpriced.UNPRICED_MODEL) and rows[1]["best_quantity"] == ""

    table = command("--days", "1", "--quantity", "1").stdout.splitlines()
    assert table[0].startswith("GPUs held by jobs, ") and "(1 day);" in table[0]
    (line,) = [line for line in table if line.startswith(H100)]
    assert line.split()[6] == str(h100["best"]["quantity"]), "the commit column"
    assert any(line.startswith(f"  {H100}, what if 1 committed: commit 1, ") for line in table)
    assert table[-1] == (
        f"not analysed (commitment): {unpriced.UNPRICED_MODEL}: no price catalogue model covers this GPU name; "
        f"{unpriced_fix(unpriced.UNPRICED_MODEL)}"
    )


def test_a_model_by_any_of_its_names(command) -> None:  # type: ignore[no-untyped-def]
    for name in ("h100", H100):
        report = orjson.loads(command("--model", name, "--format", "json").stdout)
        assert [c["model"] for c in report["commitments"]] == [H100] and report["not_analysed"] == []
    nothing = command("--model", "no-such-gpu")
    assert nothing.exit_code == 0 and nothing.stdout.splitlines()[-1] == "No ledger hours in this window."


@pytest.mark.parametrize(
    "args", [["--format", "xml"], ["--days", "0"], ["--days", "367"], ["--quantity", "-1"], ["--quantity", "1000001"]]
)
def test_options_out_of_bounds_are_refused(command, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = command(*args)
    assert result.exit_code == 2 and args[0] in result.output, result.output
